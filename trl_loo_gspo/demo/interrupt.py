"""Ctrl-C during the demo's training: the first press asks training to stop at the end of the step (so the results
measured so far can be written), a second one interrupts at once."""

from __future__ import annotations

import signal
import threading

from transformers import TrainerCallback


class CtrlC:
    """While active, the first Ctrl-C (SIGINT) only sets ``requested``; a second one raises KeyboardInterrupt.

    Training polls ``requested`` after every step (:class:`StopOnCtrlC`) and stops cleanly, so the results measured
    so far can be written. Once ``writing`` is set (the results are being written, under a second) every Ctrl-C is
    only recorded. Outside the main thread (where Python installs no signal handlers) Ctrl-C keeps its default
    behaviour: KeyboardInterrupt, which the demo also handles.
    """

    def __init__(self) -> None:
        self.requested = False
        self.writing = False
        self._previous = None
        self._installed = False

    def _handle(self, signum, frame) -> None:
        if self.requested and not self.writing:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info) -> None:
        if self._installed:
            previous = self._previous if self._previous is not None else signal.default_int_handler
            signal.signal(signal.SIGINT, previous)
            self._installed = False


class StopOnCtrlC(TrainerCallback):
    """Stops training at the end of the step during which Ctrl-C was pressed."""

    def __init__(self, ctrl_c: CtrlC) -> None:
        self.ctrl_c = ctrl_c

    def on_step_end(self, args, state, control, **kwargs):
        if self.ctrl_c.requested:
            control.should_training_stop = True
        return control
