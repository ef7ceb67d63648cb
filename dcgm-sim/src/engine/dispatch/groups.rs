//! Groups and field groups: create, fill, describe, destroy.

use crate::engine::*;

/// Stores `value` under the next unused id (ids are never reused) and returns that id.
fn insert_next<K: Ord + Copy + std::ops::AddAssign + From<u8>, V>(
    map: &mut BTreeMap<K, V>,
    next: &mut K,
    value: V,
) -> K {
    let id = *next;
    *next += K::from(1);
    map.insert(id, value);
    id
}

impl Engine {
    pub(in crate::engine) fn group_request(
        &mut self,
        conn: u64,
        req: &Request,
    ) -> Result<Reply, i32> {
        Ok(match req {
            Request::GroupCreate { group_type, name } => {
                if self.groups.len() + INTERNAL_GROUPS >= MAX_GROUPS {
                    return Err(ST_MAX_LIMIT);
                }
                let entities = match group_type {
                    0 => self.active(FE_GPU),
                    1 => Vec::new(),
                    2 => self.active(FE_SWITCH),
                    3 => self.active(FE_GPU_I),
                    4 => self.active(FE_GPU_CI),
                    5 => [FE_GPU, FE_SWITCH, FE_GPU_I, FE_GPU_CI]
                        .iter()
                        .flat_map(|g| self.active(*g))
                        .collect(),
                    _ => return Err(ST_BADPARAM),
                };
                let group = Group {
                    name: name.clone(),
                    entities,
                    owner: conn,
                };
                Reply::Id(u64::from(insert_next(
                    &mut self.groups,
                    &mut self.next_group,
                    group,
                )))
            }
            Request::GroupDestroy { group_id } => {
                let id = *group_id as u32;
                if !self.groups.contains_key(&id) {
                    return Err(ST_NOT_CONFIGURED);
                }
                self.destroy_group(id);
                Reply::Ok
            }
            Request::GroupAddEntity {
                group_id,
                entity_group,
                entity_id,
            } => {
                let id = *group_id as u32;
                if !self.groups.contains_key(&id) {
                    return Err(ST_NOT_CONFIGURED);
                }
                let ent = (*entity_group, *entity_id);
                // DcgmGroupManager.inl:652-700: the entity's status first, then duplicates,
                // then the size limit.
                match self.world.node.resolve(ent) {
                    None => return Err(ST_BADPARAM),
                    Some(e) => {
                        if let Some(g) = e.gpu() {
                            // Detached (and any status but Ok, Lost, Unsupported): BADPARAM.
                            if self.is_detached(ent) {
                                return Err(ST_BADPARAM);
                            }
                            if g.lost {
                                return Err(ST_GPU_IS_LOST);
                            }
                            if !g.supported {
                                return Err(ST_GPU_NOT_SUPPORTED);
                            }
                        }
                    }
                }
                let g = self.groups.get_mut(&id).ok_or(ST_NOT_CONFIGURED)?;
                if g.entities.contains(&ent) {
                    return Err(ST_BADPARAM);
                }
                if g.entities.len() >= MAX_GROUP_ENTITIES {
                    return Err(ST_MAX_LIMIT);
                }
                g.entities.push(ent);
                Reply::Ok
            }
            Request::GroupGetInfo { group_id } => {
                let (name, entities) = self.group(*group_id).ok_or(ST_NOT_CONFIGURED)?;
                Reply::GroupInfo { name, entities }
            }
            Request::FieldGroupCreate { field_ids, name } => {
                if field_ids.is_empty() || field_ids.len() >= MAX_FIELDS_PER_GROUP {
                    return Err(ST_BADPARAM);
                }
                if name.is_empty() || name.len() >= MAX_NAME {
                    return Err(ST_BADPARAM);
                }
                if field_ids.iter().any(|f| fields::by_id(*f).is_none()) {
                    return Err(ST_BADPARAM);
                }
                if self.field_groups.len() >= MAX_FIELD_GROUPS {
                    return Err(ST_MAX_LIMIT);
                }
                if self.field_groups.values().any(|f| &f.name == name) {
                    return Err(ST_DUPLICATE_KEY);
                }
                let def = FieldGroupDef {
                    name: name.clone(),
                    fields: field_ids.clone(),
                    owner: Some(conn),
                };
                Reply::Id(insert_next(
                    &mut self.field_groups,
                    &mut self.next_field_group,
                    def,
                ))
            }
            Request::FieldGroupDestroy { field_group_id } => {
                let f = *field_group_id;
                match self.field_groups.get(&f) {
                    None => return Err(ST_NO_DATA),
                    Some(d) if d.owner.is_none() => return Err(ST_NO_PERMISSION),
                    Some(_) => {}
                }
                // DcgmFieldGroupManager::RemoveFieldGroup unwatches nothing.
                self.field_groups.remove(&f);
                Reply::Ok
            }
            Request::FieldGroupGetInfo { field_group_id } => {
                let f = self.field_groups.get(field_group_id).ok_or(ST_NO_DATA)?;
                Reply::FieldGroups(vec![FieldGroupEntry {
                    id: *field_group_id,
                    name: f.name.clone(),
                    field_ids: f.fields.clone(),
                }])
            }
            Request::FieldGroupGetAll => Reply::FieldGroups(
                self.field_groups
                    .iter()
                    .map(|(id, f)| FieldGroupEntry {
                        id: *id,
                        name: f.name.clone(),
                        field_ids: f.fields.clone(),
                    })
                    .collect(),
            ),
            // dispatch() routes only this family here.
            _ => return Err(ST_GENERIC_ERROR),
        })
    }
}
