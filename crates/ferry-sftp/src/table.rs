//! The client's table of outstanding requests.
//!
//! libssh2 found each reply by walking a linked list of pending requests, so
//! the more it had in flight the slower every reply got. Here a request id
//! *is* a slot index (low 16 bits) plus a generation (high 16 bits): a reply
//! finds its request with one array access, in any order, and a stale or
//! forged id (right slot, wrong generation) is rejected rather than matched
//! to the wrong request.

/// The table is at its in-flight limit; wait for a reply before sending more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

impl std::fmt::Display for TableFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "too many SFTP requests in flight")
    }
}

impl std::error::Error for TableFull {}

const INDEX_BITS: u32 = 16;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
/// The most requests one table can hold, whatever limit is asked for.
pub const MAX_IN_FLIGHT: usize = 1 << INDEX_BITS;

#[derive(Debug)]
struct Slot<T> {
    generation: u16,
    value: Option<T>,
}

/// Outstanding requests, each with a caller-chosen value (what to do with
/// the reply).
#[derive(Debug)]
pub struct RequestTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    in_flight: usize,
    limit: usize,
}

impl<T> RequestTable<T> {
    /// A table that holds at most `limit` requests (capped at 65536).
    pub fn new(limit: usize) -> Self {
        let limit = limit.clamp(1, MAX_IN_FLIGHT);
        RequestTable {
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            limit,
        }
    }

    pub fn len(&self) -> usize {
        self.in_flight
    }

    pub fn is_empty(&self) -> bool {
        self.in_flight == 0
    }

    pub fn is_full(&self) -> bool {
        self.in_flight >= self.limit
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Record a request; returns the id to send it with.
    pub fn insert(&mut self, value: T) -> Result<u32, TableFull> {
        if self.is_full() {
            return Err(TableFull);
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = self.slots.get_mut(index as usize).ok_or(TableFull)?;
        slot.value = Some(value);
        self.in_flight += 1;
        Ok(((slot.generation as u32) << INDEX_BITS) | index)
    }

    /// The request a reply with this id answers, removed from the table.
    /// `None` for an id that is not outstanding (a protocol error by the
    /// peer, which the caller reports).
    pub fn take(&mut self, id: u32) -> Option<T> {
        let index = id & INDEX_MASK;
        let generation = (id >> INDEX_BITS) as u16;
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.in_flight -= 1;
        Some(value)
    }

    /// Look at an outstanding request without removing it.
    pub fn get(&self, id: u32) -> Option<&T> {
        let slot = self.slots.get((id & INDEX_MASK) as usize)?;
        if slot.generation != (id >> INDEX_BITS) as u16 {
            return None;
        }
        slot.value.as_ref()
    }

    /// Remove every outstanding request (the connection is gone).
    pub fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.in_flight);
        self.free.clear();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(v) = s.value.take() {
                s.generation = s.generation.wrapping_add(1);
                out.push(v);
            }
            self.free.push(i as u32);
        }
        self.in_flight = 0;
        out
    }
}
