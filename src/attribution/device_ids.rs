//! The device ids the kubelet reports (whatever the device plugin named the devices) turned
//! into the keys GPU series are looked up by, as dcgm-exporter understands them.

/// dcgm-exporter's own resource name and the prefix of the mixed-strategy MIG resources.
pub(crate) const GPU_RESOURCE: &str = "nvidia.com/gpu";
pub(crate) const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";
pub(crate) const MIG_UUID_PREFIX: &str = "MIG-";

/// Whether a kubelet resource is a GPU: `nvidia.com/gpu`, one of `--nvidia-resource-names`
/// (exact match), or a `nvidia.com/mig-*` resource.
pub(crate) fn is_gpu_resource(resource: &str, extra: &[String]) -> bool {
    resource == GPU_RESOURCE
        || extra.iter().any(|r| r == resource)
        || resource.starts_with(MIG_RESOURCE_PREFIX)
}

/// The sharing replica of a device id: the text after `/vgpu` (GKE) or after `::` (NVIDIA's
/// device plugin with time-slicing or MPS).
pub(crate) fn shared_gpu(id: &str) -> Option<&str> {
    if let Some((_, v)) = id.split_once("/vgpu") {
        return Some(v);
    }
    id.split_once("::").map(|(_, v)| v)
}

/// A device id without its time-slicing replica suffix (`<id>::N` -> `<id>`).
pub(crate) fn strip_vgpu_suffix(id: &str) -> &str {
    id.split_once("::").map_or(id, |(base, _)| base)
}

/// GKE's MIG form `nvidia<X>/gi<Y>[/vgpu<Z>]` -> (X, Y).
fn gke_mig(id: &str) -> Option<(u32, u32)> {
    let rest = id.strip_prefix("nvidia")?;
    let (gpu, rest) = rest.split_once("/gi")?;
    let (gi, vgpu) = match rest.split_once("/vgpu") {
        Some((gi, v)) => (gi, Some(v)),
        None => (rest, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(gpu) || !digits(gi) || vgpu.is_some_and(|v| !digits(v)) {
        return None;
    }
    Some((gpu.parse().ok()?, gi.parse().ok()?))
}

/// Where a MIG device (by UUID) lives: its parent GPU's UUID and its GPU-instance id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigLocation {
    pub parent_uuid: String,
    pub gpu_instance: u32,
}

/// Every key a device id matches, as dcgm-exporter's `toDeviceToPod` builds them:
/// - `MIG-<uuid>[::N]`: `"<gpu index>-<GI id>"` (through NVML and the GPU list), the UUID
///   without `MIG-`;
/// - `nvidiaX/giY[/vgpuZ]`: `"X-Y"`;
/// - `.../vgpuN` and `<id>::N`: the id before the suffix;
/// - always the raw id.
///
/// `mig` resolves a MIG UUID; `gpu_index` maps a GPU UUID to its DCGM index.
pub(crate) fn keys(
    id: &str,
    mig: &dyn Fn(&str) -> Option<MigLocation>,
    gpu_index: &dyn Fn(&str) -> Option<u32>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(mig_uuid) = id.strip_prefix(MIG_UUID_PREFIX) {
        if let Some(loc) = mig(strip_vgpu_suffix(id)) {
            if let Some(gpu) = gpu_index(&loc.parent_uuid) {
                out.push(format!("{gpu}-{}", loc.gpu_instance));
            }
            // What a MIG series of one of several host engines is keyed by (`merge::pod_key`).
            out.push(format!("{}/{}", loc.parent_uuid, loc.gpu_instance));
        }
        out.push(mig_uuid.to_string());
    } else if let Some((gpu, gi)) = gke_mig(id) {
        out.push(format!("{gpu}-{gi}"));
    } else if let Some((base, _)) = id.split_once("/vgpu") {
        out.push(base.to_string());
    } else if let Some((base, _)) = id.split_once("::") {
        out.push(base.to_string());
    }
    out.push(id.to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "b8ea3855-276c-c9cb-b366-c6fa655957c5";

    // dcgm-exporter's getSharedGPU table.
    #[test]
    fn shared_gpu_replica() {
        for (id, want) in [
            ("nvidia0/vgpu0", Some("0")),
            ("nvidia0", None),
            ("nvidia0/gi0/vgpu1", Some("1")),
            ("nvidia0/gi0", None),
            ("GPU-5a5a7118-e550-79a1-597e-7631e126c57a::3", Some("3")),
            ("GPU-5a5a7118-e550-79a1-597e-7631e126c57a", None),
            ("MIG-42f0f413-f7b0-58cc-aced-c1d1fb54db26::0", Some("0")),
            ("MIG-42f0f413-f7b0-58cc-aced-c1d1fb54db26", None),
        ] {
            assert_eq!(shared_gpu(id), want, "{id}");
        }
    }

    // dcgm-exporter's stripVGPUSuffix table.
    #[test]
    fn vgpu_suffix_is_stripped() {
        let mig = "MIG-2ce7a541-c516-5dbc-a76e-26cc100d9b55";
        assert_eq!(strip_vgpu_suffix(&format!("{mig}::7")), mig);
        assert_eq!(strip_vgpu_suffix(mig), mig);
        let gpu = "GPU-65759866-6a45-99ff-bc37-c534ea0ae191";
        assert_eq!(strip_vgpu_suffix(gpu), gpu);
        assert_eq!(strip_vgpu_suffix(&format!("{U}::2")), U);
        assert_eq!(strip_vgpu_suffix(""), "");
        assert_eq!(strip_vgpu_suffix(&format!("{mig}::")), mig);
    }

    #[test]
    fn resource_filter() {
        let extra = vec!["nvidia.com/a100".to_string()];
        assert!(is_gpu_resource("nvidia.com/gpu", &[]));
        assert!(is_gpu_resource("nvidia.com/mig-1g.10gb", &[]));
        assert!(is_gpu_resource("nvidia.com/a100", &extra));
        assert!(!is_gpu_resource("nvidia.com/a100", &[]));
        // Renamed time-slicing resources only match when listed (upstream issue #151).
        assert!(!is_gpu_resource("nvidia.com/gpu.shared", &extra));
        assert!(!is_gpu_resource("cpu", &[]));
    }

    fn mig_at_gi3(uuid: &str) -> Option<MigLocation> {
        uuid.starts_with("MIG-").then(|| MigLocation {
            parent_uuid: "GPU-parent".into(),
            gpu_instance: 3,
        })
    }

    fn index(uuid: &str) -> Option<u32> {
        (uuid == "GPU-parent").then_some(0)
    }

    #[test]
    fn keys_of_every_form() {
        let k = |id: &str| keys(id, &mig_at_gi3, &index);
        assert_eq!(k(U), [U]);
        // The parent's UUID and GPU instance key it among several host engines.
        assert_eq!(
            k(&format!("MIG-{U}")),
            ["0-3", "GPU-parent/3", U, &format!("MIG-{U}")]
        );
        assert_eq!(
            k(&format!("MIG-{U}::4")),
            [
                "0-3",
                "GPU-parent/3",
                &format!("{U}::4"),
                &format!("MIG-{U}::4")
            ]
        );
        assert_eq!(k("nvidia0/gi3"), ["0-3", "nvidia0/gi3"]);
        assert_eq!(k("nvidia1/gi12/vgpu0"), ["1-12", "nvidia1/gi12/vgpu0"]);
        assert_eq!(k("nvidia0/vgpu1"), ["nvidia0", "nvidia0/vgpu1"]);
        assert_eq!(k(&format!("{U}::2")), [U, &format!("{U}::2")]);
        assert_eq!(k("nvidia3"), ["nvidia3"]);
        // Not GKE's MIG form: falls through to the sharing rule.
        assert_eq!(k("nvidiaX/gi1/vgpu2"), ["nvidiaX/gi1", "nvidiaX/gi1/vgpu2"]);
    }

    #[test]
    fn unresolvable_mig_uuid_keeps_the_uuid_keys() {
        let none = |_: &str| None;
        assert_eq!(
            keys(&format!("MIG-{U}"), &none, &index),
            [U, &format!("MIG-{U}")]
        );
        // Resolved, but the parent is not a GPU of the page's index (only its UUID key).
        assert_eq!(
            keys(&format!("MIG-{U}"), &mig_at_gi3, &|_| None),
            ["GPU-parent/3", U, &format!("MIG-{U}")]
        );
    }
}
