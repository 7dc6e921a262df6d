"""What a W&B run shows beyond the scalar metrics: attention heatmaps, samples, per-length results.

:class:`WandbReports` is added by the CLI when ``wandb.enabled`` is set. At every
validation it logs the attention maps of a fixed set of validation examples
(teacher-forced, so the same sentences every time) and, where they were decoded,
sample translations; at the end of a test run the per-length-bucket results as a
``wandb.Table`` with a line plot of each metric against source length, the test
attention maps and a table of sample translations.
"""

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.loggers import WandbLogger

from seq2seq_attn.data.datamodule import Seq2SeqDataModule
from seq2seq_attn.metrics import METRICS
from seq2seq_attn.plots import draw_heatmap
from seq2seq_attn.results import write_json


def bucket_upper_edges(buckets: list[dict]) -> list[int]:
    """The x position of each bucket row: its ``hi``; an open bucket (``hi`` None) gets the previous width."""
    edges: list[int] = []
    for row in buckets:
        if row["hi"] is None:
            width = edges[-1] - (edges[-2] if len(edges) > 1 else 0) if edges else row["lo"]
            edges.append(row["lo"] - 1 + width)
        else:
            edges.append(row["hi"])
    return edges


class WandbReports(pl.Callback):
    def __init__(self, heatmaps: int = 4, samples: int = 8) -> None:
        self.heatmaps, self.samples = heatmaps, samples

    @staticmethod
    def _runs(trainer: "pl.Trainer") -> list[Any]:
        if not trainer.is_global_zero:
            return []
        return [logger.experiment for logger in trainer.loggers if isinstance(logger, WandbLogger)]

    def setup(self, trainer, pl_module, stage: str) -> None:
        folder = Path(trainer.log_dir or trainer.default_root_dir)  # a collective: every process asks
        for run in self._runs(trainer):  # `seq2seq-attn resume` continues this W&B run
            if run.id:
                write_json(folder / "wandb_run.json", {"id": run.id, "project": run.project, "offline": run.offline})

    def on_validation_end(self, trainer, pl_module) -> None:
        runs = self._runs(trainer)
        if not runs or trainer.sanity_checking:
            return
        maps = pl_module.attention_maps()
        self._log(runs, trainer, "val", maps)

    def on_test_end(self, trainer, pl_module) -> None:
        runs = self._runs(trainer)
        results = getattr(pl_module, "test_results", None)
        if not runs or results is None:
            return
        import wandb

        buckets = results["buckets"]
        metrics = [m.name for m in METRICS.values() if m.per_bucket and buckets and m.name in buckets[0]]
        edges = bucket_upper_edges(buckets)
        rows = [[b["bucket"], edge, int(b["count"]), *(b[m] for m in metrics)] for b, edge in zip(buckets, edges)]
        table = wandb.Table(columns=["bucket", "max_source_length", "count", *metrics], data=rows)
        payload: dict[str, Any] = {"test/buckets": table}
        for metric in metrics:
            payload[f"test/{metric}_vs_length"] = wandb.plot.line(
                table, "max_source_length", metric, title=f"test {metric} vs source length"
            )
        for run in runs:
            run.log(payload)
            run.summary.update({f"test/{k}": v for k, v in results["overall"].items()})
        self._log(runs, trainer, "test", pl_module.attention_maps())

    def _log(self, runs: list, trainer: "pl.Trainer", split: str, maps: list[dict]) -> None:
        import wandb

        payload: dict[str, Any] = {}
        images = [self._heatmap(item, split) for item in maps[: self.heatmaps] if item.get("weights") is not None]
        if images:
            payload[f"{split}/attention"] = images
        samples = [m for m in maps if "output" in m][: self.samples]
        datamodule = trainer.datamodule
        detokenize = datamodule.detokenize if isinstance(datamodule, Seq2SeqDataModule) else _text  # as read
        if samples:
            payload[f"{split}/samples"] = wandb.Table(
                columns=["index", "source", "reference", "hypothesis"],
                data=[[m["index"], *(detokenize(m[k]) for k in ("src", "ref", "output"))] for m in samples],
            )
        for run in runs:
            if payload:
                run.log({**payload, "trainer/global_step": trainer.global_step})

    @staticmethod
    def _heatmap(item: dict, split: str) -> Any:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import wandb

        fig, ax = plt.subplots(figsize=(max(3, 0.25 * len(item["src"]) + 1), max(2.5, 0.22 * len(item["hyp"]) + 1)))
        rows = "reference (teacher-forced)" if split == "val" else "output"
        draw_heatmap(ax, item["weights"], item["src"], item["hyp"], f"{split} example {item['index']}: rows = {rows}")
        fig.tight_layout()
        image = wandb.Image(fig, caption=f"{split} example {item['index']}")
        plt.close(fig)
        return image


def _text(tokens: list) -> str:
    return " ".join(map(str, tokens))
