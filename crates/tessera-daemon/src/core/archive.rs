//! Finished jobs: archived (dropped from memory once durable) and their slots compacted.

use super::*;

impl Core {
    /// Drops from memory the jobs that finished since the last call. The driver calls it once
    /// their final rows are durable; from then on they are served from the store (the API's
    /// reads of archived jobs and listings fall back to it). What remains of each is a slot with
    /// its id, tenant, queue and state, because the policy's job ids are indices.
    pub fn archive_finished(&mut self) {
        for idx in std::mem::take(&mut self.to_archive) {
            let Some(job) = self.jobs.get_mut(idx) else {
                continue;
            };
            if job.archived || !job.row.state.is_terminal() {
                continue;
            }
            job.archived = true;
            self.archived_slots += 1;
            *self.archived_counts.entry(job.row.state).or_default() += 1;
            self.by_id.remove(&job.row.id);
            if let Some(h) = job.row.handle.take() {
                if self.by_handle.get(&h) == Some(&idx) {
                    self.by_handle.remove(&h);
                }
            }
            job.spec = JobSpec::default();
            job.alloc = None;
            let r = &mut job.row;
            r.name = String::new();
            r.spec_json = String::new();
            r.placement = Vec::new();
            r.plan = None;
            r.message = None;
            r.backend_state = None;
            for s in [&mut r.name, &mut r.spec_json, &mut r.tenant, &mut r.queue] {
                s.shrink_to_fit();
            }
        }
    }

    /// Changes the fewest archived slots worth a compaction (tests).
    #[cfg(test)]
    pub(crate) fn set_compaction_threshold(&mut self, slots: usize) {
        self.compact_min = slots.max(1);
    }

    /// Drops the slots of archived jobs from the job table once they are at least as many as
    /// the jobs held (and [`COMPACT_MIN_SLOTS`]), renumbering the jobs that remain in order,
    /// so that finished jobs leave nothing in memory. Runs at the start of a scheduling point,
    /// after the view is brought up to date (no finished job is visible then, and no decision
    /// or staged submission holds an index). Only when the policy renumbers its own state
    /// ([`Policy::renumber_jobs`]); otherwise the slots stay until a restart.
    pub(super) fn compact_finished(&mut self) {
        let held = self.jobs.len() - self.archived_slots;
        if self.cannot_compact
            || self.archived_slots < self.compact_min
            || self.archived_slots < held
            || !self.restoring.is_empty()
        {
            return;
        }
        let mut map: Vec<Option<tessera_model::JobId>> = Vec::with_capacity(self.jobs.len());
        let mut next = 0u32;
        for job in &self.jobs {
            if job.archived {
                map.push(None);
            } else {
                map.push(Some(tessera_model::JobId(next)));
                next += 1;
            }
        }
        // A finished job still in the view would be told `Ended` at the next point: wait.
        if self
            .active_buf
            .iter()
            .any(|a| map.get(a.id.index()).is_none_or(Option::is_none))
        {
            return;
        }
        if !self.policy.renumber_jobs(&map) {
            self.cannot_compact = true;
            return;
        }
        let to = |idx: usize| map.get(idx).copied().flatten().map(|j| j.index());
        let kept = |k: &mut usize| {
            *k += 1;
            map.get(*k - 1).is_some_and(Option::is_some)
        };
        let mut k = 0;
        self.jobs.retain(|_| kept(&mut k));
        let mut k = 0;
        self.specs.retain(|_| kept(&mut k));
        for (i, spec) in self.specs.iter_mut().enumerate() {
            spec.id = tessera_model::JobId(i as u32);
        }
        let remap_map = |m: &mut HashMap<String, usize>| {
            m.retain(|_, idx| match to(*idx) {
                Some(n) => {
                    *idx = n;
                    true
                }
                None => false,
            })
        };
        remap_map(&mut self.by_handle);
        remap_map(&mut self.job_tokens);
        self.verifying.retain(|_, v| match to(v.idx) {
            Some(n) => {
                v.idx = n;
                true
            }
            None => false,
        });
        self.by_id.retain(|_, idx| match to(*idx) {
            Some(n) => {
                *idx = n;
                true
            }
            None => false,
        });
        self.active = self.active.iter().filter_map(|&i| to(i)).collect();
        self.holding = self.holding.iter().filter_map(|&i| to(i)).collect();
        for list in [
            &mut self.awaiting_inventory,
            &mut self.dirty,
            &mut self.to_archive,
        ] {
            *list = list.iter().filter_map(|&i| to(i)).collect();
        }
        self.is_dirty = vec![false; self.jobs.len()];
        for &i in &self.dirty {
            self.is_dirty[i] = true;
        }
        self.active_pos = vec![NOT_VISIBLE; self.jobs.len()];
        for (pos, a) in self.active_buf.iter_mut().enumerate() {
            if let Some(n) = to(a.id.index()) {
                a.id = tessera_model::JobId(n as u32);
                self.active_pos[n] = pos as u32;
            }
        }
        self.actions.clear();
        self.refused.clear();
        self.archived_slots = 0;
    }

    /// Counts finished jobs a restart leaves in the store only (see
    /// [`archive_finished`](Self::archive_finished)); their ids are never reused.
    pub fn note_archived(&mut self, rows: &[JobRow]) {
        for r in rows {
            self.next_id = self.next_id.max(r.id + 1);
            *self.archived_counts.entry(r.state).or_default() += 1;
        }
    }
}
