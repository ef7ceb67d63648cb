//! RAII handles for DCGM groups and field groups: destroyed on drop, so a collector that
//! is rebuilt (MIG reconfiguration, reconnect) cannot leak the engine's 64-group budget.

use crate::session::Inner;
use crate::types::Entity;
use std::sync::Arc;

/// An entity group created with `dcgmGroupCreate`.
pub struct Group {
    pub(crate) session: Arc<Inner>,
    pub(crate) id: u64,
    pub(crate) entities: Vec<Entity>,
}

impl Group {
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The entities added at creation, in order.
    pub fn entities(&self) -> &[Entity] {
        &self.entities
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Errors are ignored: after a lost connection the engine has already forgotten it.
        let _ = self.session.destroy_group(self.id);
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Group({}, {} entities)", self.id, self.entities.len())
    }
}

/// A field group created with `dcgmFieldGroupCreate`.
pub struct FieldGroup {
    pub(crate) session: Arc<Inner>,
    pub(crate) id: u64,
    pub(crate) fields: Vec<u16>,
}

impl FieldGroup {
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn fields(&self) -> &[u16] {
        &self.fields
    }
}

impl Drop for FieldGroup {
    fn drop(&mut self) {
        let _ = self.session.destroy_field_group(self.id);
    }
}

impl std::fmt::Debug for FieldGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FieldGroup({}, {:?})", self.id, self.fields)
    }
}
