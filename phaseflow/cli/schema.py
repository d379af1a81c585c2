"""``phaseflow schema``: print the JSON Schema the loader validates against."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "The output is byte for byte the schemas/workflow.schema.json file."


def run(args: argparse.Namespace) -> int:
    from phaseflow.spec.schema import schema_text

    sys.stdout.write(schema_text())
    return 0
