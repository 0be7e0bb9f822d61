"""The probe schedule: while a policy has paused drafting (length 0), one round now and then drafts
anyway (a probe), so the policy notices when the text becomes predictable again.

Probes back off: the first comes after `first_after` paused rounds, each probe that fails doubles
the wait up to `longest_wait`, and one that resumes drafting resets it. A failed probe costs about
one draft step, a missed predictable stretch costs all its savings, and one unlucky round at the
start of a generation must not silence the draft for a dozen rounds of a short output.
"""
from __future__ import annotations


class ProbeSchedule:
    def __init__(self, first_after: int = 2, longest_wait: int = 12) -> None:
        if not 1 <= first_after <= longest_wait:
            raise ValueError(f"need 1 <= first_probe_after <= probe_every, got {first_after} and {longest_wait}")
        self.first_after = first_after
        self.longest_wait = longest_wait
        self.reset()

    def reset(self) -> None:
        self.idle_rounds = 0  # paused rounds since the last probe
        self.wait = self.first_after  # the paused round that probes

    def due(self) -> bool:
        """Whether the next paused round is a probe."""
        return self.idle_rounds + 1 >= self.wait

    def record_paused_round(self) -> bool:
        """A paused round went by; returns whether it was the probe."""
        if self.due():
            self.idle_rounds = 0
            return True
        self.idle_rounds += 1
        return False

    def after_probe(self, drafting_resumed: bool) -> None:
        self.wait = self.first_after if drafting_resumed else min(self.longest_wait, 2 * self.wait)
