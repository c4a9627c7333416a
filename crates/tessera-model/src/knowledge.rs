//! [`Knowledge`]: what a driver has learned about a job (by profiling, from reports), as typed
//! values that any mechanism can attach and read back.
//!
//! A mechanism defines its own type (Synergy's CPU/memory sensitivity estimate, MISO's
//! predicted slice speeds, ...), a profiler produces it, and the mechanism's policy reads it
//! with [`Knowledge::get`]. Generic crates never name those types. Lookup is a linear scan
//! over a handful of entries: cheap, allocation-free, and independent of any hash order.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// A small set of typed facts about one job, at most one value per type.
#[derive(Clone, Default)]
pub struct Knowledge {
    items: Vec<Arc<dyn Any + Send + Sync>>,
}

impl Knowledge {
    /// Nothing known.
    pub const fn new() -> Knowledge {
        Knowledge { items: Vec::new() }
    }

    /// Knowledge holding one value.
    pub fn of<T: Any + Send + Sync>(value: T) -> Knowledge {
        let mut k = Knowledge::new();
        k.insert(value);
        k
    }

    /// Adds `value`, replacing any earlier value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.insert_arc(Arc::new(value));
    }

    /// Adds a shared value, replacing any earlier value of the same type.
    pub fn insert_arc<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        self.items.retain(|v| !v.is::<T>());
        self.items.push(value);
    }

    /// The value of type `T`, if known.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.items.iter().find_map(|v| v.downcast_ref::<T>())
    }

    /// The shared value of type `T`, if known.
    pub fn get_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.items
            .iter()
            .find(|v| v.is::<T>())
            .and_then(|v| Arc::clone(v).downcast::<T>().ok())
    }

    /// Adds everything `other` knows (its values win on the same type).
    pub fn merge(&mut self, other: Knowledge) {
        for v in other.items {
            let id = (*v).type_id();
            self.items.retain(|w| (**w).type_id() != id);
            self.items.push(v);
        }
    }

    /// True when nothing is known.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl fmt::Debug for Knowledge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Knowledge({} facts)", self.items.len())
    }
}

/// Two knowledge sets are equal when they hold the very same shared values.
impl PartialEq for Knowledge {
    fn eq(&self, other: &Knowledge) -> bool {
        self.items.len() == other.items.len()
            && self
                .items
                .iter()
                .zip(&other.items)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Speed(f64);
    #[derive(Debug, PartialEq)]
    struct Memory(u64);

    #[test]
    fn typed_values_replace_per_type() {
        let mut k = Knowledge::new();
        assert!(k.get::<Speed>().is_none() && k.is_empty());
        k.insert(Speed(1.5));
        k.insert(Memory(3));
        k.insert(Speed(2.0));
        assert_eq!(k.get::<Speed>(), Some(&Speed(2.0)));
        assert_eq!(k.get::<Memory>(), Some(&Memory(3)));
        let mut other = Knowledge::of(Memory(9));
        other.merge(k.clone());
        assert_eq!(other.get::<Memory>(), Some(&Memory(3)));
        assert_eq!(k.clone(), k);
        assert_ne!(Knowledge::of(Speed(1.0)), Knowledge::of(Speed(1.0)));
        assert_eq!(k.get_arc::<Speed>().map(|s| s.0), Some(2.0));
    }
}
