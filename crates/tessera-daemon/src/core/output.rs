//! Output: the commands the driver carries out, and when the core next wants to be called.

use super::*;

impl Core {
    /// The next command for the driver, in order; `None` when there is nothing left to do.
    pub fn poll_command(&mut self) -> Option<Command> {
        if let Some(c) = self.commands.pop_front() {
            return Some(c);
        }
        if self.pending.is_empty() {
            None
        } else {
            Some(Command::Persist(std::mem::take(&mut self.pending)))
        }
    }

    /// When the core next wants [`schedule`](Self::schedule) called without any input (a
    /// round boundary or a submission retry).
    pub fn poll_timeout(&self) -> Option<SimTime> {
        [
            self.next_round,
            self.retry_at,
            self.wakeup,
            self.deferred_arrivals(),
            self.services.timer,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When arrivals held back by [`CoreSettings::arrival_coalescing`] are due.
    pub(super) fn deferred_arrivals(&self) -> Option<SimTime> {
        let t = self.trigger;
        if !t.arrival || t.completion || t.round {
            return None;
        }
        Some(self.last_schedule? + self.settings.arrival_coalescing)
    }

    /// Queues a command that acts on the world, after everything decided so far is persisted.
    pub(super) fn act(&mut self, command: Command) {
        // A launch onto GPUs a stopped run still holds waits for them (drain.rs).
        let command = match command {
            Command::Launch(l) => match self.hold_for_drain(l) {
                Some(l) => Command::Launch(l),
                None => return,
            },
            c => c,
        };
        if !self.pending.is_empty() {
            let batch = std::mem::take(&mut self.pending);
            self.commands.push_back(Command::Persist(batch));
        }
        self.commands.push_back(command);
    }
}
