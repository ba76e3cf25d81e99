"""Stop a run whose loss or gradient norm went NaN / inf, before it saves poisoned weights.

Each step folds "is this step finite?" into a device-side tensor holding the first bad step
(no host sync: the check is a few tiny tensor ops queued behind the step). The flag is
read, agreed over every rank with one all-reduce (MIN), only at log steps and before every
save (`Checkpointer(before_save=guard.check)`), so a save never persists weights from after
a non-finite step and retention never runs because of one: the last finite checkpoint stays.

fp16 is different: an overflowing step is expected and skipped by the loss scaler, which
halves the scale. Those steps do not count. What does count is a scale that collapses: the
scale is already at its floor (1.0) and the step still overflowed, or SKIP_LIMIT steps in a
row were skipped. That is a run that no longer trains, and it stops the same way.
"""

from __future__ import annotations

# torch is imported inside the functions: the CLI imports this module before it may import torch.

SKIP_LIMIT = 20  # consecutive fp16 overflow skips that count as a collapsed loss scale
EXIT_NON_FINITE = 3  # the CLI's exit code for a stopped run (0 done, 1 failed, 2 bad setup)
_NONE = 2**62  # "no bad step yet" (all-reduced with MIN)


class NonFinite(Exception):
    """Training produced NaN / inf at `step`; nothing after it was saved."""

    def __init__(self, step: int, what: str, last_saved: int | None = None):
        self.step = step
        kept = f" (the last checkpoint, step {last_saved}, is from before it and is kept)" if last_saved else ""
        again = "then rerun: it resumes from the last checkpoint" if last_saved else "then rerun"
        super().__init__(
            f"{what} at step {step}: training stopped and nothing was saved after it{kept}; lower "
            f"optimizer.lr, raise training.warmup_steps or check the data, {again}"
        )


class FiniteGuard:
    """`observe(step, stats)` every step (no host sync without fp16); `check()` at log steps
    and before saves raises NonFinite on every rank together."""

    def __init__(self, device, *, every: int, last_step: int, params=None):
        import torch

        self.every, self.last_step, self.params = every, last_step, params
        self.first_bad = torch.full((), _NONE, dtype=torch.int64, device=device)
        self.what = "non-finite loss or grad norm"
        self.skips = 0
        self.last_saved: int | None = None

    def observe(self, step: int, stats) -> None:
        import torch

        if stats.loss_scale is not None:  # fp16: the step already synced to decide the skip
            self._fp16(step, stats)
        else:
            bad = ~(torch.isfinite(stats.loss) & torch.isfinite(stats.grad_norm))
            self.first_bad = torch.where(
                bad, torch.minimum(self.first_bad, torch.full_like(self.first_bad, step)), self.first_bad
            )
        if step % self.every == 0 or step == self.last_step:
            self.check()

    def _fp16(self, step: int, stats) -> None:
        import torch

        if not stats.skipped:
            self.skips = 0
            if not bool(torch.isfinite(stats.loss)):
                self._mark(step, "non-finite loss")
            return
        self.skips += 1
        if stats.loss_scale <= 1.0 or self.skips >= SKIP_LIMIT:
            self._mark(
                step, f"fp16 loss scale collapsed ({self.skips} overflow steps in a row, scale {stats.loss_scale:g})"
            )

    def _mark(self, step: int, what: str) -> None:
        if int(self.first_bad) == _NONE:
            self.first_bad.fill_(step)
            self.what = what

    def _weights_finite(self) -> bool:
        """This rank's shards of every parameter are finite (one host sync, at save time only)."""
        import torch

        flags = [torch.isfinite(p.to_local() if hasattr(p, "to_local") else p).all() for p in self.params()]
        return bool(torch.stack(flags).all()) if flags else True

    def check(self) -> None:
        """Collective: raise NonFinite on every rank when any rank saw a bad step."""
        import torch.distributed as dist

        flag = self.first_bad.clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        step = int(flag)
        if step != _NONE:
            raise NonFinite(step, self.what, self.last_saved)

    def before_save(self, step: int) -> None:
        """The Checkpointer's hook: check, and remember what the last finite save was. The
        weights are checked too: a step with a finite loss and grad norm can still overflow
        them in its update, and the next step's loss (which would show it) comes after this save."""
        if self.params is not None and not self._weights_finite():
            self._mark(step, "non-finite weights after the update")
        self.check()
        self.last_saved = step
