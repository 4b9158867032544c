"""Arguments several verbs share (the study file, --study-name, --from, --storage, --data, the release and selection
flags), and reading them back."""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from swagppm import ConfigError
from swagppm.config import PRIVATE_TEST, check_value
from tuner.config import StudyConfig
from tuner.export import Chosen, read_export
from tuner.rejudge import named_study
from tuner.storage import STORAGE_ENV
from tuner.tuning import ACCOUNTED, private_selection

if TYPE_CHECKING:
    from swagppm.releases.selection import Selection

STUDY_HELP = "study TOML file (see studies/demo.toml)"


def add_study(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", type=Path, help=STUDY_HELP)


def add_study_or_export(parser: argparse.ArgumentParser, *, study_help: str,
                        from_help: str = "an export JSON file") -> None:
    """A study file or ``--from EXPORT.json``, one of them (``one_source`` checks it)."""
    parser.add_argument("study", type=Path, nargs="?", help=study_help)
    parser.add_argument("--from", dest="source", type=Path, default=None, help=from_help)


def add_storage(parser: argparse.ArgumentParser) -> None:
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
    """``chosen`` on ``--data`` when given: only a configuration tuned on public data (or accounted) moves to other
    records, which are then private; the export's ε was measured on other records, so it is not compared."""
    if args.data is None:
        return chosen
    mode = (chosen.tuning or {}).get("mode")
    if not chosen.config.data.public and mode != ACCOUNTED:
        raise ConfigError(f"--data {args.data}: {chosen.path} was chosen by a study on data not declared public "
                          "([data] public = true) and not accounted, so its choice already looked at those records; "
                          "run a study on the new records instead")
    path = Path(args.data).expanduser()
    source = str(path.resolve()) if path.exists() or path.suffix else str(args.data)
    config = chosen.config.replace(data={"source": source, "public": False})
    return dataclasses.replace(chosen, config=config, epsilon=None, stage1_fingerprint=None)


def add_release_flags(parser: argparse.ArgumentParser) -> None:
    """--force, the private selection of the released draw (Liu & Talwar), and --overwrite."""
    parser.add_argument("--force", action="store_true", help="release even a data-derived tokenizer (demos only)")
    parser.add_argument("--min-utility", type=float, default=None,
                        help="release the first secret draw whose F1 on --selection-data reaches this (private "
                             "selection with random stopping; its total epsilon is computed and stated)")
    parser.add_argument("--selection-data", default=None,
                        help=f"records you declare public, scored for --min-utility (same columns as the data), or "
                             f"'{PRIVATE_TEST}' for the private test split (then the selection is unaccounted: "
                             "the choice of the draw is not counted in epsilon)")
    parser.add_argument("--selection-metric", choices=("f1_macro", "f1_weighted"), default="f1_macro",
                        help="the F1 compared with --min-utility (default f1_macro)")
    parser.add_argument("--selection-stop-probability", type=float, default=0.1,
                        help="chance of giving up after each draw that misses (default 0.1: 10 draws on average)")
    parser.add_argument("--selection-delta", type=float, default=None,
                        help="delta of the selection's total epsilon (default 1/n² for n training records)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a release folder that is not empty, as a whole, once the new one is complete")


def study_config(args: argparse.Namespace, *, data: bool = True) -> StudyConfig:
    """The study file; its storage from --storage, else $SWAGPPM_TUNE_STORAGE, for verbs that open the study; the
    study --study-name names; on --data unless ``data`` is false (a chosen configuration takes it through
    ``data_override``)."""
    config = StudyConfig.from_toml(args.study)
    storage = (args.storage or os.environ.get(STORAGE_ENV)) if hasattr(args, "storage") else None
    if storage:
        config = config.with_storage(storage)
    if getattr(args, "study_name", None):
        config = named_study(config, args.study_name)
    return config if not data or getattr(args, "data", None) is None else config.with_data(args.data)


def one_source(args: argparse.Namespace) -> None:
    if (args.study is None) == (args.source is None):
        raise ConfigError(f"swagppm-tune {args.verb}: give a study TOML file or --from EXPORT.json (one of them)")


def exported(args: argparse.Namespace) -> Chosen:
    """The configuration of ``--from EXPORT.json``, on ``--data`` when given (``data_override``)."""
    return data_override(args, read_export(args.source))


def check_output(path: Path, what: str, *, folder: bool = False) -> None:
    """Refuse, before any work, an output file (or ``folder``) that could not be written; missing folders are made."""
    if not folder and path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; name a file")
    home = path if folder else path.parent
    try:
        home.mkdir(parents=True, exist_ok=True)
        if not folder and path.exists():
            path.open("a").close()  # opening to append changes nothing
        else:
            tempfile.TemporaryFile(dir=home).close()
    except OSError as error:
        in_the_way = next((p for p in (home, *home.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{in_the_way} is a file, not a folder" if in_the_way else error.strerror or str(error)
        raise ConfigError(f"{what} {path}: cannot be written ({reason})") from None


def selection(args: argparse.Namespace, *, releasing: bool) -> Selection | None:
    """The release's private selection from --min-utility and --selection-data (both or neither), checked now."""
    given = {"--min-utility": args.min_utility, "--selection-data": args.selection_data}
    if all(value is None for value in given.values()):
        return None
    missing = [flag for flag, value in given.items() if value is None]
    if missing or not releasing:
        raise ConfigError(f"{' and '.join(missing) or '--release'} must be given too: private selection chooses "
                          "the released draw by its F1 on the selection data")
    check_value(0 <= args.min_utility <= 1, "--min-utility", args.min_utility, "an F1 score in [0, 1]")
    check_value(0 < args.selection_stop_probability <= 1, "--selection-stop-probability",
                args.selection_stop_probability, "in (0, 1]")
    delta = args.selection_delta
    check_value(delta is None or 0 < delta < 1, "--selection-delta", delta, "in (0, 1)")
    source = args.selection_data
    if source != PRIVATE_TEST and not Path(source).expanduser().is_file():
        raise ConfigError(f"--selection-data {source}: no such file (or pass {PRIVATE_TEST})")
    return private_selection(source=source, threshold=args.min_utility, metric=args.selection_metric,
                             stop_probability=args.selection_stop_probability)
