//! The per-GPU cap on consumers with series (`--usage-max-consumers-per-gpu`): on each GPU
//! (its MIG instances together) the consumers seen first keep their series; the others are
//! still booked but left off the page, and counted once each time they are left off.

use super::ledger::Book;
use super::EntityKey;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Marks the consumers over the cap (`capped`) on every GPU; returns, per GPU (its `gpu`
/// label), how many were newly left off, 0 for a GPU whose consumers all have series.
pub(super) fn apply(
    books: &mut HashMap<EntityKey, Book>,
    gpu_labels: &HashMap<EntityKey, String>,
    max: usize,
) -> BTreeMap<String, u64> {
    // (seq, entity, consumer labels) per GPU UUID, sorted: first seen first, then by name.
    let mut per_gpu: BTreeMap<&str, Vec<(u64, &EntityKey, &super::ledger::ConsumerId)>> =
        BTreeMap::new();
    for (key, book) in books.iter() {
        // Consumers that get no series anyway (processes unknown) take no place.
        for (id, c) in book.consumers.iter().filter(|(_, c)| c.known) {
            per_gpu.entry(&key.0).or_default().push((c.seq, key, id));
        }
    }
    let mut capped: HashSet<(EntityKey, super::ledger::ConsumerId)> = HashSet::new();
    let mut newly: BTreeMap<String, u64> = BTreeMap::new();
    for list in per_gpu.values_mut() {
        list.sort();
        let gpu = gpu_labels.get(list[0].1).cloned().unwrap_or_default();
        newly.entry(gpu).or_default();
        capped.extend(
            list.iter()
                .skip(max)
                .map(|(_, k, id)| ((*k).clone(), (*id).clone())),
        );
    }
    for (key, book) in books.iter_mut() {
        let gpu = gpu_labels.get(key).cloned().unwrap_or_default();
        for (id, c) in book.consumers.iter_mut() {
            let over = capped.contains(&(key.clone(), id.clone()));
            if over && !c.capped {
                *newly.entry(gpu.clone()).or_default() += 1;
            }
            c.capped = over;
        }
    }
    newly
}
