"""Checkpoints and the run's folder on disk: ``records`` (the completion record written last, and the checks a resume
makes; the names below, the module's path before the driver became a package) and ``disk`` (the run's lock, write
failures told plainly). The driver's side of a resume is ``trl_explore.driver.resume``."""

from trl_explore.utils.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "CheckpointStatus": "trl_explore.checkpoints.records",
    "write_record": "trl_explore.checkpoints.records",
    "read_record": "trl_explore.checkpoints.records",
    "list_files": "trl_explore.checkpoints.records",
    "file_digest": "trl_explore.checkpoints.records",
    "digest_files": "trl_explore.checkpoints.records",
    "file_problem": "trl_explore.checkpoints.records",
    "inspect_checkpoint": "trl_explore.checkpoints.records",
    "checkpoint_folders": "trl_explore.checkpoints.records",
    "inspect_run": "trl_explore.checkpoints.records",
    "checkpoint_step": "trl_explore.checkpoints.records",
    "describe_torn": "trl_explore.checkpoints.records",
    "run_id": "trl_explore.checkpoints.records",
    "run_record": "trl_explore.checkpoints.records",
    "foreign_checkpoint": "trl_explore.checkpoints.records",
    "compare_run_records": "trl_explore.checkpoints.records",
    "optimizer_settings": "trl_explore.checkpoints.records",
    "compare_optimizer_settings": "trl_explore.checkpoints.records",
    "first_nonfinite": "trl_explore.checkpoints.records",
    "nonfinite_state": "trl_explore.checkpoints.records",
    "RECORD_NAME": "trl_explore.checkpoints.records",
    "FORMAT": "trl_explore.checkpoints.records",
    "TRAINER_STATE": "trl_explore.checkpoints.records",
    "DIGEST": "trl_explore.checkpoints.records",
    "GEOMETRY_FIELDS": "trl_explore.checkpoints.records",
    "IDENTITY_FIELDS": "trl_explore.checkpoints.records",
    "KEPT_FROM_CHECKPOINT": "trl_explore.checkpoints.records",
    "USED_AS_GIVEN": "trl_explore.checkpoints.records",
    "LOCK_NAME": "trl_explore.checkpoints.disk",
    "CheckpointWriteError": "trl_explore.checkpoints.disk",
    "OutputDirInUse": "trl_explore.checkpoints.disk",
    "OutputDirLock": "trl_explore.checkpoints.disk",
    "check_output_dir_free": "trl_explore.checkpoints.disk",
    "describe_write_failure": "trl_explore.checkpoints.disk",
    "is_write_failure": "trl_explore.checkpoints.disk",
}, fallback="trl_explore.checkpoints.records")  # any other name of the module this package was
