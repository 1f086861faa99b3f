"""Callbacks for `model.fit`, one per file.

Seeing inside, while it trains:
    attention_maps.AttentionMapCallback    attention maps, rollout or occlusion, token heat maps, the change view,
                                           and the attention explorer page
    position_encoding_plot.PositionEncodingPlot    a learned position table and its similarities
    gradient_norm.GradientNormCallback     the global gradient norm in the logs

Runs that survive crashes (every file written under a temporary name and renamed: `keras_tfm.files`):
    backup_and_restore.BackupAndRestore    resumes an interrupted fit; keeps the previous epoch until the new one
                                           is complete, and falls back to it when the newest is damaged
    csv_logger.CSVLogger                   one row per epoch; a resumed fit neither repeats nor loses a row
    latest_checkpoint.LatestCheckpoint     the latest epoch's model in one .keras file

Training helpers:
    terminate_on_nan.TerminateOnNaN        stops on a NaN loss without waiting for every step
    time_budget.TimeBudget                 the epochs that fit in a time budget, with a schedule planned for them
    checkpoint_average.CheckpointAverage   the mean of the last (or best) epochs' weights, set when training ends
"""

from keras_tfm.callbacks.backup_and_restore import BackupAndRestore
from keras_tfm.callbacks.checkpoint_average import CheckpointAverage, average_weights
from keras_tfm.callbacks.csv_logger import CSVLogger
from keras_tfm.callbacks.gradient_norm import GradientNormCallback
from keras_tfm.callbacks.latest_checkpoint import LatestCheckpoint
from keras_tfm.callbacks.terminate_on_nan import TerminateOnNaN
from keras_tfm.callbacks.time_budget import TimeBudget
from keras_tfm.insight.attention_map_callback import AttentionMapCallback
from keras_tfm.insight.position_encoding_plot import PositionEncodingPlot

__all__ = ["AttentionMapCallback", "BackupAndRestore", "CSVLogger", "CheckpointAverage", "GradientNormCallback",
           "LatestCheckpoint", "PositionEncodingPlot", "TerminateOnNaN", "TimeBudget", "average_weights"]
