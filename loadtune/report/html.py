"""A scan result as HTML: the report a terminal shows, for Jupyter.

Importing this module registers ``html_report`` in ``model.results.RENDERERS``, which
``ScanResult._repr_html_`` reads (the model may not import the report layer). ``loadtune.ScanResult``
and ``loadtune.scan`` import it; it loads neither torch nor the engine.
"""

from __future__ import annotations

import io

from rich.console import Console

from loadtune.model.results import RENDERERS, ScanResult
from loadtune.report.scan import print_report

HTML_WIDTH = 120  # columns of the rendered report: a notebook cell shows about this many
HTML_FORMAT = ('<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
               "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">{code}</pre>")


def html_report(result: ScanResult) -> str:
    """The report as the terminal shows it (table, diagnosis, recommendation), as HTML with inline styles."""
    console = Console(file=io.StringIO(), record=True, width=HTML_WIDTH, force_jupyter=False, color_system="truecolor")
    print_report(console, result)
    return console.export_html(inline_styles=True, code_format=HTML_FORMAT)


RENDERERS["text/html"] = html_report
