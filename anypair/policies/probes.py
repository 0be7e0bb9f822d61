"""The probe schedule: while a policy has paused drafting (length 0), one round now and then drafts
anyway (a probe), so the policy notices when the text becomes predictable again.

Probes back off: the first comes after `first_after` paused rounds, each probe that fails doubles
the wait up to `longest_wait`, and one that resumes drafting resets it. A failed probe costs about
one draft step, a missed predictable stretch costs all its savings, and one unlucky round at the
start of a generation must not silence the draft for a dozen rounds of a short output.

After `give_up_after` failed probes in a row the schedule stops probing for the rest of the
request. A probe is dearer than its one draft step: the draft must first read every token committed
since it last drafted (a batched catch-up: SmolLM2 on 2 cores, ~3 ms a token against ~34 ms a
target step), so a request that probes on forever pays ~10% for a draft that never helps. Giving
up bounds that loss; an engine where drafting pays resumes at the first probe and never gets here.
"""
from __future__ import annotations


class ProbeSchedule:
    def __init__(self, first_after: int = 2, longest_wait: int = 12, give_up_after: int = 3) -> None:
        if not 1 <= first_after <= longest_wait:
            raise ValueError(f"need 1 <= first_probe_after <= probe_every, got {first_after} and {longest_wait}")
        if give_up_after < 1:
            raise ValueError(f"give_up_after must be >= 1 failed probes, got {give_up_after}")
        self.first_after = first_after
        self.longest_wait = longest_wait
        self.give_up_after = give_up_after
        self.reset()

    def reset(self) -> None:
        self.idle_rounds = 0  # paused rounds since the last probe
        self.wait = self.first_after  # the paused round that probes
        self.failed_in_a_row = 0

    @property
    def given_up(self) -> bool:
        """No more probes in this request: drafting stays paused."""
        return self.failed_in_a_row >= self.give_up_after

    def due(self) -> bool:
        """Whether the next paused round is a probe."""
        return not self.given_up and self.idle_rounds + 1 >= self.wait

    def record_paused_round(self) -> bool:
        """A paused round went by; returns whether it was the probe."""
        if self.due():
            self.idle_rounds = 0
            return True
        self.idle_rounds += 1
        return False

    def after_probe(self, drafting_resumed: bool) -> None:
        self.wait = self.first_after if drafting_resumed else min(self.longest_wait, 2 * self.wait)
        self.failed_in_a_row = 0 if drafting_resumed else self.failed_in_a_row + 1
