"""Grid files: base configs plus dotted keys swept over lists of values.

    name: toy_reverse
    configs: [../base.yaml, ../toy/reverse.yaml]        # relative to this file
    fixed: {trainer.max_epochs: 8}                      # optional overrides for every cell
    grid:
      model.attention: [none, additive, general, dot, concat, scaled_dot]
      model.flow: [none, bahdanau, luong]
      seed_everything: [1, 2, 3]

``grid`` may also be a list of such mappings: the cells are the union of their
products, in order (e.g. two seeds for some models and one for others)::

    grid:
      - {model.flow: [none, bahdanau], seed_everything: [1, 2]}
      - {model.flow: [luong], model.attention: [dot], seed_everything: [1]}

The product of the grid is filtered: combinations the model rejects (a scorer
with flow ``none``, ``none`` with an attentional flow) are skipped, and cells
that differ only in a setting their model ignores (``input_feed`` outside the
Luong flow) run once.
"""

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from seq2seq_attn.errors import ConfigError
from seq2seq_attn.metrics import DEFAULT_METRIC
from seq2seq_attn.modules.decoder import check_flow_attention
from seq2seq_attn.modules.multihead import MULTIPLICATIVE

MODEL_DEFAULTS = {"model.flow": "bahdanau", "model.attention": "additive", "model.input_feed": True,
                  "model.arch": "rnn", "model.heads": 1}  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """One point of the grid: its overrides, in grid order."""

    overrides: tuple[tuple[str, Any], ...]

    @property
    def name(self) -> str:
        """A folder name: ``attention=dot__flow=luong__seed_everything=1``."""
        return "__".join(f"{key.split('.')[-1]}={_text(value)}" for key, value in self.overrides)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.overrides)

    def cli_args(self) -> list[str]:
        return [arg for key, value in self.overrides for arg in (f"--{key}", _text(value))]


def check_panels(panels: Any, path: Path) -> dict[str, list[str]]:
    """A grid file's ``panels:``, which splits the report's length figures into side by side panels and its
    learning curves into rows: each panel's title maps to the model labels it draws, as shell-style patterns;
    models no panel names (the reference rows) are drawn in every panel (length_study.panel_models)."""
    if panels is None:
        return {}

    def is_panel(name: Any, patterns: Any) -> bool:
        return isinstance(name, str) and isinstance(patterns, list) and all(isinstance(p, str) for p in patterns)

    if not isinstance(panels, dict) or not panels or not all(v and is_panel(k, v) for k, v in panels.items()):
        raise ConfigError(f"'panels:' in {path} must map each panel's title to a list of model-label patterns, "
                          f"e.g. panels: {{'recurrent': ['luong + *'], 'Transformer': ['transformer*']}}")  # fmt: skip
    return panels


def check_compare(compare: Any, path: Path) -> list[str | list[str]]:
    """A grid file's ``compare:``, the pairs of models whose paired tests ``summary.md`` lists (every pair stays
    in ``significance.csv``): a model-label pattern compares every other model with the models it names; a list
    of two patterns ``[A, B]`` compares the models the first names with those the second names
    (length_study.compared_pairs)."""
    if compare is None:
        return []

    def is_entry(entry: Any) -> bool:
        pair = isinstance(entry, list) and len(entry) == 2 and all(isinstance(p, str) and p for p in entry)
        return pair or (isinstance(entry, str) and bool(entry))

    if not isinstance(compare, list) or not compare or not all(is_entry(e) for e in compare):
        raise ConfigError(f"'compare:' in {path} must list model-label patterns (each against every model) or "
                          f"pairs [A, B] of them, e.g. compare: ['bahdanau + additive', ['luong + dot', "
                          f"'luong + general']]")  # fmt: skip
    return compare


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass
class Grid:
    name: str
    configs: list[Path]
    grid: dict[str, list]  # every key and the union of its values (what a W&B sweep sweeps)
    fixed: dict[str, Any] = field(default_factory=dict)
    metric: str = DEFAULT_METRIC
    panels: dict[str, list[str]] = field(default_factory=dict)  # the report's length figures, split (check_panels)
    compare: list[str | list[str]] = field(default_factory=list)  # the paired tests summary.md lists (check_compare)
    path: Path = Path(".")
    parts: list[dict[str, list]] = field(default_factory=list)  # the sub-grids whose products are the cells

    @classmethod
    def load(cls, path: str | Path) -> "Grid":
        path = Path(path)
        if not path.is_file():
            raise ConfigError(
                f"grid file not found: {path}: pass a file such as experiments/ablations/toy_reverse.yaml"
            )
        spec = yaml.safe_load(path.read_text()) or {}
        unknown = set(spec) - {"name", "configs", "grid", "fixed", "metric", "panels", "compare"}
        if unknown:
            raise ConfigError(
                f"unknown key(s) {sorted(unknown)} in grid {path}: "
                "use name, configs, grid, fixed, metric, panels, compare"
            )
        parts = spec.get("grid")
        parts = [parts] if isinstance(parts, dict) else parts
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) and p for p in parts):
            raise ConfigError(
                f"grid {path} has no 'grid:' mapping of dotted keys to lists of values (or a list of them)"
            )
        union: dict[str, list] = {}
        for part in parts:
            for key, values in part.items():
                if not isinstance(values, list) or not values:
                    raise ConfigError(f"grid key {key!r} in {path} must map to a non-empty list, got {values!r}")
                union.setdefault(key, [])
                union[key] += [v for v in values if v not in union[key]]
        configs = [(path.parent / c).resolve() for c in spec.get("configs", [])]
        missing = [str(c) for c in configs if not c.is_file()]
        if missing:
            raise ConfigError(f"config(s) named in grid {path} not found: {missing}")
        return cls(
            name=spec.get("name", path.stem),
            configs=configs,
            grid=union,
            fixed=spec.get("fixed") or {},
            metric=spec.get("metric", DEFAULT_METRIC),
            panels=check_panels(spec.get("panels"), path),
            compare=check_compare(spec.get("compare"), path),
            path=path,
            parts=parts,
        )

    def base_values(self) -> dict[str, Any]:
        """``model.flow`` etc. as the configs and ``fixed`` set them (for validity checks)."""
        values = dict(MODEL_DEFAULTS)
        for config in self.configs:
            data = yaml.safe_load(config.read_text()) or {}
            for key in MODEL_DEFAULTS:
                section, name = key.split(".")
                if name in (data.get(section) or {}):
                    values[key] = data[section][name]
        values.update({k: v for k, v in self.fixed.items() if k in MODEL_DEFAULTS})
        return values

    def cells(self) -> tuple[list[Cell], list[tuple[Cell, str]]]:
        """Valid, de-duplicated cells in grid order, and the skipped ones with the reason."""
        base = self.base_values()
        cells, skipped, seen = [], [], set()
        products = (
            Cell(tuple(zip(part, values)))
            for part in self.parts or [self.grid]
            for values in itertools.product(*part.values())
        )
        for cell in products:
            merged = {**base, **cell.as_dict()}
            try:
                if merged.get("model.arch", "rnn") == "rnn":  # a Transformer has no flow or scorer to pair
                    check_flow_attention(merged["model.flow"], merged["model.attention"])
            except ConfigError as err:
                skipped.append((cell, str(err)))
                continue
            canonical = tuple(
                (k, v) for k, v in cell.overrides if not (k == "model.input_feed" and merged["model.flow"] != "luong")
            )
            # with heads > 1 the multiplicative scorers name one computation (modules/multihead.py): run it once
            multi_head = (merged.get("model.heads") or 1) > 1 and merged["model.attention"] in MULTIPLICATIVE
            identity = tuple((k, "multi-head" if k == "model.attention" and multi_head else v) for k, v in canonical)
            if identity in seen:
                if canonical != cell.overrides:
                    why = "input_feed only matters to flow 'luong'"
                elif identity != canonical:
                    why = f"with heads > 1, {', '.join(MULTIPLICATIVE)} are one multi-head attention"
                else:
                    why = "listed twice"
                skipped.append((cell, f"same model as an earlier cell ({why})"))
                continue
            seen.add(identity)
            cells.append(Cell(canonical))
        return cells, skipped

    def fixed_args(self) -> list[str]:
        return Cell(tuple(self.fixed.items())).cli_args()
