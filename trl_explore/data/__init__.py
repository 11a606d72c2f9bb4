"""Multi-teacher offline data sets for OGER (§3.1, App. A.1): sources, filters, statistics, builder.

Typical use::

    from trl_explore.data import build_offline_dataset, champ_records

    dataset, report = build_offline_dataset(champ_records(), max_length=8192, system_prompt="oger")
    print(report.markdown())          # Table 4 per teacher
    report.save("out/")               # offline_stats.md / .json, offline_lengths.png (Figure 4)

or, with no arguments at all, ``load_default_offline_dataset()`` (CHAMP, cached on disk).

The task ladder (:mod:`trl_explore.data.ladder`): generated arithmetic at graded difficulty, with solutions in four
teacher styles, on which the embedded policy's groups mix right and wrong answers::

    from trl_explore.data import ladder_dataset

    splits = ladder_dataset(levels=["one_digit", "two_ops"])   # DatasetDict: train / validation / test
"""

from trl_explore.data.builder import (
    DEFAULT_OUTPUT_DIR,
    OFFLINE_COLUMNS,
    OfflineDatasetBuilder,
    build_offline_dataset,
    load_default_offline_dataset,
    save_offline_dataset,
)
from trl_explore.data.generation import generated_records
from trl_explore.data.ladder import (
    LADDER_COLUMNS,
    LEVELS,
    LadderProblem,
    ladder_dataset,
    ladder_problems,
    ladder_prompt,
)
from trl_explore.data.ladder_teachers import TEACHER_STYLES
from trl_explore.data.prompts import PROMPT_PRESETS, PromptPreset, build_prompt, get_prompt_preset
from trl_explore.data.sources import ProblemRecord, champ_records, luffy_records, teacher_column_records
from trl_explore.data.stats import BuildReport, TeacherStats

__all__ = [
    "DEFAULT_OUTPUT_DIR",
    "LADDER_COLUMNS",
    "LEVELS",
    "OFFLINE_COLUMNS",
    "PROMPT_PRESETS",
    "TEACHER_STYLES",
    "BuildReport",
    "LadderProblem",
    "OfflineDatasetBuilder",
    "ProblemRecord",
    "PromptPreset",
    "TeacherStats",
    "build_offline_dataset",
    "build_prompt",
    "champ_records",
    "generated_records",
    "get_prompt_preset",
    "ladder_dataset",
    "ladder_problems",
    "ladder_prompt",
    "load_default_offline_dataset",
    "luffy_records",
    "save_offline_dataset",
    "teacher_column_records",
]
