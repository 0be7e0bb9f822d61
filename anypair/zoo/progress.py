"""The zoo's progress display: one rich progress bar per download on stderr (what it fetches, bytes,
rate, time left), so that a first run shows a bar per model instead of the download client's output."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Optional

#: how a bar hears progress: the bytes done so far (never fewer than it heard before)
ShowBytes = Callable[[int], None]


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

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True)) as progress:
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
