"""The zoo's progress display: one rich progress bar per download on stderr (what it fetches, bytes,
rate, time left), so that a first run shows a bar per model instead of the download client's output."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Optional

#: how a bar hears progress: the bytes done so far (never fewer than it heard before)
ShowBytes = Callable[[int], None]
#: characters of the bar itself: with a model's name, bytes, rate and time left the line fits 80 columns
BAR_WIDTH = 16
#: the width of a bar's line written to a file or a pipe (no terminal to fit)
LOG_WIDTH = 120


@contextlib.contextmanager
def download_bar(label: str, total: Optional[int], enabled: bool = True) -> Iterator[ShowBytes]:
    """A bar for one download of `total` bytes (None: unknown), left on screen when done; yields the
    function that moves it. Disabled: nothing is shown and the function does nothing."""
    if not enabled:
        yield lambda done: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    console = Console(stderr=True)
    if not console.is_terminal:  # a log: the finished bar is written once, as one line that needs no wrapping
        console = Console(stderr=True, width=LOG_WIDTH)
    with Progress(TextColumn("{task.description}"), BarColumn(bar_width=BAR_WIDTH), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=console) as progress:
        task = progress.add_task(label, total=total)
        shown = 0

        def show(done: int) -> None:
            nonlocal shown
            # a part's archive may be a little larger than the bytes it adds: the bar never goes back
            shown = max(shown, done if total is None else min(done, total))
            progress.update(task, completed=shown)

        yield show
        # done: a bar of unknown size ends full, at the bytes it counted
        final = shown if total is None else total
        progress.update(task, total=final, completed=final)
