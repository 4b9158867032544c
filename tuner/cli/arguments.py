"""Arguments several verbs share (the study file, --study-name, --from, --storage, --data, the release and selection
flags), and reading them back."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from swagppm import ConfigError, SWAGPPMConfig
from swagppm.config import MAX_EPOCHS, PRIVATE_TEST, check_stop_probability

if TYPE_CHECKING:  # the tuner's modules are imported where they are used: --help loads none of them
    import optuna

    from swagppm.releases.selection import Selection
    from tuner.config import StudyConfig
    from tuner.export import Chosen

T = TypeVar("T")

STUDY_HELP = "study TOML file (see studies/demo.toml)"


class ArgumentsRefused(Exception):
    """A flag or argument refused by the parser; its text is the whole line to print."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose error is one line (the verb, the argument, why), raised as ``ArgumentsRefused``
    for ``tuner.cli.main`` to print (exit status 2); no abbreviated flags (``--over`` is not ``--overwrite``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ArgumentsRefused(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _typed(parse: Callable[[str], T], ok: Callable[[T], bool], expected: str) -> Callable[[str], T]:
    """An argparse type: ``parse`` the text, and refuse a value that is not ``ok`` saying what is ``expected``."""
    def convert(text: str) -> T:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {expected}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text} must be {expected}")
        return value

    convert.__name__ = expected  # argparse names the type in its own messages
    return convert


positive_int = _typed(int, lambda v: v >= 1, "an integer of at least 1")
epochs = _typed(int, lambda v: 1 <= v <= MAX_EPOCHS, f"an integer from 1 to {MAX_EPOCHS} (each epoch is a pass over "
                "the training split)")
nonnegative_int = _typed(int, lambda v: v >= 0, "an integer of at least 0")
positive_float = _typed(float, lambda v: v > 0 and math.isfinite(v), "a positive finite number")
finite_float = _typed(float, math.isfinite, "a finite number")
score = _typed(float, lambda v: 0 <= v <= 1, "an F1 score in [0, 1]")
probability = _typed(float, lambda v: 0 < v < 1, "a probability in (0, 1)")
share = _typed(float, lambda v: 0 < v <= 1, "in (0, 1]")
degradation = _typed(float, lambda v: 0 <= v < 1, "a fraction in [0, 1)")
port = _typed(int, lambda v: 1 <= v <= 65535, "a port in 1..65535")


def stop_probability(text: str) -> float:
    """--selection-stop-probability: in (0, 1], and not so small that the expected candidates are absurd."""
    value = share(text)
    try:
        check_stop_probability(value, "--selection-stop-probability")
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def add_study(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", type=Path, help=STUDY_HELP)


def add_study_output(parser: argparse.ArgumentParser, *, output_help: str) -> None:
    """A verb that writes one owner-side file of an existing study: the study file, ``-o FILE``, ``--overwrite``,
    ``--storage`` and ``--study-name`` (``study_and_output`` reads them back)."""
    add_study(parser)
    parser.add_argument("-o", "--output", type=Path, required=True, help=output_help)
    add_overwrite(parser)
    add_storage(parser)
    add_study_name(parser)


def study_and_output(args: argparse.Namespace) -> tuple[StudyConfig, optuna.Study]:
    """The study file read, ``-o`` checked (never an input, never overwritten unasked) and the study opened, in that
    order, before any work (``add_study_output``'s verbs)."""
    from tuner.study import open_existing_study

    config = study_config(args)
    checked_output(args, args.output, "-o", config=config)
    return config, open_existing_study(config)


def add_study_or_export(parser: argparse.ArgumentParser, *, study_help: str,
                        from_help: str = "an export JSON file") -> None:
    """A study file or ``--from EXPORT.json``, one of them (``one_source`` checks it)."""
    parser.add_argument("study", type=Path, nargs="?", help=study_help)
    parser.add_argument("--from", dest="source", type=Path, default=None, help=from_help)


def add_storage(parser: argparse.ArgumentParser) -> None:
    from tuner.storage import STORAGE_ENV

    parser.add_argument("--storage", default=None,
                        help=f"storage URL instead of ${STORAGE_ENV} or [study] storage (the variable keeps a "
                             "password out of the process list)")


def add_study_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--study-name", default=None,
                        help="open this study of the storage instead of [study] name (e.g. one written by "
                             "`rejudge --name`)")


def add_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None, help="the records' file or folder, instead of [data] source")


def add_data_override(parser: argparse.ArgumentParser) -> None:
    """--data for verbs that fit a chosen configuration: public-proxy tuning's one fit on the private records."""
    parser.add_argument("--data", default=None,
                        help="fit the chosen configuration on these records instead (public-proxy tuning: tuned on "
                             "data declared public with [data] public = true, then fitted once on the private data; "
                             "refused for a configuration chosen on undeclared data, unless accounted)")


def data_override(args: argparse.Namespace, chosen: Chosen) -> Chosen:
    """``chosen`` on ``--data`` when given: only a configuration its sealed claim says was tuned on public data (or
    accounted) moves to other records, which are then private: another data set, named by their file
    (``default_data_set``), whose ledger its release enters; the export's ε was measured on other records, so it is
    not compared."""
    from swagppm.claim import ACCOUNTED
    from tuner.config import default_data_set

    if args.data is None:
        return chosen
    claim = chosen.claim.claim
    if not claim.data_public and claim.mode != ACCOUNTED:
        raise ConfigError(f"--data {args.data}: {chosen.path} was chosen by a study on data not declared public "
                          "([data] public = true) and not accounted, so its choice already looked at those records; "
                          "run a study on the new records instead")
    path = Path(args.data).expanduser()
    source = str(path.resolve()) if path.exists() or path.suffix else str(args.data)
    tuned_on = Path(chosen.config.data.source).expanduser()
    if source == chosen.config.data.source or (path.exists() and tuned_on.exists() and path.samefile(tuned_on)):
        raise ConfigError(f"--data {args.data}: these are the records {chosen.path} was tuned on (declared public "
                          "there); a public-proxy choice is fitted once on other records, the private ones")
    config = chosen.config.replace(data={"source": source, "public": False})
    return dataclasses.replace(chosen, config=config, epsilon=None, stage1_fingerprint=None,
                               claim=chosen.claim.on_records(default_data_set(source)), entered=False)


def add_release_flags(parser: argparse.ArgumentParser) -> None:
    """--force, the private selection of the released draw (Liu & Talwar), --standard-class and --overwrite."""
    parser.add_argument("--force", action="store_true", help="release even a data-derived tokenizer (demos only)")
    parser.add_argument("--min-utility", type=score, default=None,
                        help="release the first secret draw whose F1 on --selection-data reaches this (private "
                             "selection with random stopping; its total epsilon is computed and stated)")
    parser.add_argument("--selection-data", default=None,
                        help=f"records you declare public, scored for --min-utility (same columns as the data), or "
                             f"'{PRIVATE_TEST}' for the private test split (then the selection is unaccounted: "
                             "the choice of the draw is not counted in epsilon)")
    parser.add_argument("--selection-metric", choices=("f1_macro", "f1_weighted"), default="f1_macro",
                        help="the F1 compared with --min-utility (default f1_macro)")
    parser.add_argument("--selection-stop-probability", type=stop_probability, default=0.1,
                        help="chance of giving up after each draw that misses (default 0.1: 10 draws on average)")
    parser.add_argument("--selection-delta", type=probability, default=None,
                        help="delta of the selection's total epsilon (default: the study's, from [study] "
                             "accounting_delta or the public bound max_records; never from the private record count)")
    parser.add_argument("--standard-class", action="store_true",
                        help="save a mean-pooled head as a standard BertForSequenceClassification too (one appended "
                             "layer computes the masked mean: the same logits in float32, wrong in half precision); "
                             "first-token pooling and native heads are always standard")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier release in the folder (one holding swagppm's release_card.json; any "
                             "other folder that is not empty is refused), as a whole, once the new one is complete, "
                             "and existing --json or --figures files (never an input of the run)")


def study_config(args: argparse.Namespace, *, data: bool = True) -> StudyConfig:
    """The study file; its storage from --storage, else $SWAGPPM_TUNE_STORAGE, for verbs that open the study; the
    study --study-name names; on --data unless ``data`` is false (a chosen configuration takes it through
    ``data_override``)."""
    from tuner.config import StudyConfig
    from tuner.extras import require_storage_driver
    from tuner.rejudge import named_study
    from tuner.storage import STORAGE_ENV, kind, masked_url

    config = StudyConfig.from_toml(args.study)
    storage = (args.storage or os.environ.get(STORAGE_ENV)) if hasattr(args, "storage") else None
    if storage:
        given = "--storage" if args.storage else f"${STORAGE_ENV}"
        try:
            kind(storage)  # a malformed URL is the flag's (or the variable's) fault, not the study file's
        except ConfigError as error:
            raise ConfigError(f"{given}: {error}") from None
        config = config.with_storage(storage)
    if hasattr(args, "storage"):  # a verb that opens the study: its database driver is checked before any work
        require_storage_driver(config.storage_url, shown=masked_url(config.storage_url))
    if getattr(args, "study_name", None):
        config = named_study(config, args.study_name)
    return config if not data or getattr(args, "data", None) is None else config.with_data(args.data)


def one_source(args: argparse.Namespace) -> None:
    if (args.study is None) == (args.source is None):
        raise ConfigError(f"swagppm-tune {args.verb}: give a study TOML file or --from EXPORT.json (one of them)")


def exported(args: argparse.Namespace) -> Chosen:
    """The configuration of ``--from EXPORT.json``, on ``--data`` when given (``data_override``)."""
    from swagppm.config import check_regular_file
    from tuner.export import read_export

    check_regular_file(args.source, f"--from {args.source}")  # a device or FIFO would never end or never answer
    return data_override(args, read_export(args.source))


def add_overwrite(parser: argparse.ArgumentParser, *, what: str = "the output file") -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace {what} if it exists (never an input of the run: the study file, its storage, "
                             "the data, the file read)")


def run_config(args: argparse.Namespace) -> StudyConfig | SWAGPPMConfig | None:
    """The configuration a verb runs: its study file's, else its export's (None: neither was given)."""
    if getattr(args, "study", None) is not None:
        return study_config(args)
    if getattr(args, "source", None) is not None:
        return exported(args).config
    return None


def checked_output(args: argparse.Namespace, path: Path, what: str, *,
                   config: StudyConfig | SWAGPPMConfig | None = None, overwrite: bool | None = None,
                   folder: bool = False, files: tuple[str, ...] = ()) -> Path:
    """``tuner.outputs.check_output`` on the run's inputs (``config``'s, else ``run_config``'s) and --overwrite."""
    from tuner.outputs import check_output, inputs_of

    config = run_config(args) if config is None else config
    overwrite = getattr(args, "overwrite", False) if overwrite is None else overwrite
    return check_output(path, inputs=inputs_of(config, args), overwrite=overwrite, what=what, folder=folder,
                        files=files)


def check_folder(path: Path, what: str) -> None:
    """The tool's own folder (artifacts) can be made and written, checked before any work."""
    from tuner.outputs import check_output

    check_output(path, inputs={}, overwrite=True, what=what, folder=True)


def check_artifacts(config: StudyConfig) -> None:
    """Where the study keeps its figures can be written, checked before any work: its folder, or its bucket (one
    probe object, written and removed)."""
    if config.artifact_store_url is None:
        check_folder(config.artifact_dir, "[study] artifacts")
    else:
        from tuner.artifacts import check_artifact_store

        check_artifact_store(config)


def selection(args: argparse.Namespace, *, releasing: bool) -> Selection | None:
    """The release's private selection from --min-utility and --selection-data (both or neither), checked now."""
    from tuner.tuning import private_selection

    given = {"--min-utility": args.min_utility, "--selection-data": args.selection_data}
    if all(value is None for value in given.values()):
        return None
    missing = [flag for flag, value in given.items() if value is None]
    if missing or not releasing:
        raise ConfigError(f"{' and '.join(missing) or '--release'} must be given too: private selection chooses "
                          "the released draw by its F1 on the selection data")
    source = args.selection_data
    if source != PRIVATE_TEST and not Path(source).expanduser().is_file():
        raise ConfigError(f"--selection-data {source}: no such file (or pass {PRIVATE_TEST})")
    return private_selection(source=source, threshold=args.min_utility, metric=args.selection_metric,
                             stop_probability=args.selection_stop_probability)
