"""Loggers: Lightning's, with what resumed runs and dashboards need."""

import csv
import io
import os
import warnings

from pytorch_lightning.loggers import CSVLogger as LightningCSVLogger

from seq2seq_attn.results import write_atomic


class CSVLogger(LightningCSVLogger):
    """Lightning's CSV logger that continues an existing ``metrics.csv`` instead of deleting it.

    A resumed run (``seq2seq-attn resume``) writes into its old folder, where
    Lightning's writer would delete the earlier rows. Rows of steps between the last
    checkpoint and the crash appear twice; the later ones are the resumed run's.
    """

    @property
    def experiment(self):
        if self._experiment is None:
            path = os.path.join(self.log_dir, "metrics.csv")
            previous = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
            with warnings.catch_warnings():
                if previous:
                    warnings.filterwarnings("ignore", message=".*Previous log files in this directory.*")
                writer = super().experiment  # deletes an existing metrics.csv
            if previous:
                write_atomic(path, previous)
                writer.metrics_keys = sorted(next(csv.reader(io.StringIO(previous)), []))
        return super().experiment
