use super::*;

/// (family, labels, value) of every series.
type Flat = (String, Vec<(String, String)>, f64);

fn series(p: &Page) -> Vec<Flat> {
    p.families()
        .flat_map(|f| {
            f.series()
                .map(|s| {
                    let labels = s
                        .labels()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    (f.name().to_string(), labels, s.value())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn l(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn series_keep_their_family_order_label_order_and_values() {
    let mut p = Page::default();
    p.add(
        "A",
        "a",
        PromType::Gauge,
        &[("gpu", "0"), ("UUID", "x")],
        1.0,
    );
    p.add("B", "b", PromType::Counter, &[("gpu", "0")], 2.0);
    p.add(
        "A",
        "a",
        PromType::Gauge,
        &[("UUID", "y"), ("gpu", "1")],
        3.0,
    );
    p.add("C", "c", PromType::Gauge, &[], f64::NAN);
    let s = series(&p);
    assert_eq!(s.len(), 4);
    assert_eq!(s[0], ("A".into(), l(&[("gpu", "0"), ("UUID", "x")]), 1.0));
    assert_eq!(s[1], ("A".into(), l(&[("UUID", "y"), ("gpu", "1")]), 3.0));
    assert_eq!(s[2], ("B".into(), l(&[("gpu", "0")]), 2.0));
    assert_eq!(s[3].1, l(&[]));
    assert!(s[3].2.is_nan());
    let kinds: Vec<bool> = p.families().map(|f| f.is_counter()).collect();
    assert_eq!(kinds, [false, true, false]);
}

#[test]
fn a_label_set_in_another_order_is_a_duplicate() {
    let mut p = Page::default();
    p.add(
        "A",
        "a",
        PromType::Gauge,
        &[("gpu", "0"), ("UUID", "x")],
        1.0,
    );
    p.add(
        "A",
        "a",
        PromType::Gauge,
        &[("UUID", "x"), ("gpu", "0")],
        2.0,
    );
    // Same values under other names, and a subset, are other series.
    p.add(
        "A",
        "a",
        PromType::Gauge,
        &[("UUID", "0"), ("gpu", "x")],
        3.0,
    );
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 4.0);
    assert_eq!(p.series_count(), 3);
    assert_eq!(p.dropped[&DropReason::Duplicate], 1);
    let values: Vec<f64> = series(&p).iter().map(|s| s.2).collect();
    assert_eq!(values, [1.0, 3.0, 4.0]);
}

#[test]
fn a_dropped_series_leaves_no_labels_behind() {
    let mut p = Page::default();
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 1.0);
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 2.0);
    p.add("A", "other help", PromType::Gauge, &[("gpu", "9")], 2.0);
    p.add("A", "a", PromType::Gauge, &[("gpu", "1")], 3.0);
    assert_eq!(
        series(&p),
        [
            ("A".into(), l(&[("gpu", "0")]), 1.0),
            ("A".into(), l(&[("gpu", "1")]), 3.0)
        ]
    );
    assert_eq!(p.dropped[&DropReason::Conflict], 1);
}

#[test]
fn rewrite_adds_labels_copies_and_drops_duplicates_and_empties_families() {
    let mut p = Page::default();
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 1.0);
    p.add("A", "a", PromType::Gauge, &[("gpu", "1")], 2.0);
    p.add("B", "b", PromType::Counter, &[("gpu", "0")], 5.0);
    p.rewrite(|name, mut s| match name {
        "A" if s.label("gpu") == Some("0") => {
            let mut copy = s.clone();
            copy.push_label("pod", "p");
            copy.value = 10.0;
            s.push_label("pod", "q");
            // The same series twice: the second is a duplicate.
            vec![s.clone(), s, copy]
        }
        "A" => {
            s.labels_mut()[0].set_value("7");
            vec![s]
        }
        _ => vec![],
    });
    assert_eq!(
        series(&p),
        [
            ("A".into(), l(&[("gpu", "0"), ("pod", "q")]), 1.0),
            ("A".into(), l(&[("gpu", "0"), ("pod", "p")]), 10.0),
            ("A".into(), l(&[("gpu", "7")]), 2.0),
        ]
    );
    assert_eq!(p.dropped[&DropReason::Duplicate], 1);
    assert_eq!(p.series_count(), 3);
    assert_eq!(p.families().count(), 1, "B is empty and not listed");
}

#[test]
fn a_cleared_page_is_empty_and_takes_new_families_in_their_new_order() {
    let mut p = Page::default();
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 1.0);
    p.add("B", "b", PromType::Gauge, &[("gpu", "0")], 1.0);
    p.drop_value(DropReason::Stale);
    p.piece_failed("x", "y");
    p.oldest_sample_us = Some(5);
    p.clear();
    assert_eq!(p.series_count(), 0);
    assert!(p.dropped.is_empty() && p.failures.is_empty());
    assert_eq!(p.oldest_sample_us, None);
    p.add("B", "b2", PromType::Counter, &[("gpu", "1")], 2.0);
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 3.0);
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 3.0);
    let names: Vec<(&str, &str, bool)> = p
        .families()
        .map(|f| (f.name(), f.help(), f.is_counter()))
        .collect();
    assert_eq!(names, [("B", "b2", true), ("A", "a", false)]);
    assert_eq!(p.dropped[&DropReason::Duplicate], 1);
    assert_eq!(
        series(&p),
        [
            ("B".into(), l(&[("gpu", "1")]), 2.0),
            ("A".into(), l(&[("gpu", "0")]), 3.0)
        ]
    );
}

#[test]
fn label_names_are_found_whatever_order_series_name_them_in() {
    let mut p = Page::default();
    for i in 0..50 {
        let gpu = i.to_string();
        let labels: Vec<(&str, &str)> = if i % 3 == 0 {
            vec![("UUID", "u"), ("gpu", &gpu), ("extra", "e")]
        } else {
            vec![("gpu", &gpu), ("UUID", "u")]
        };
        p.add("A", "a", PromType::Gauge, &labels, i as f64);
    }
    for (i, s) in series(&p).iter().enumerate() {
        let gpu = i.to_string();
        let want = if i % 3 == 0 {
            l(&[("UUID", "u"), ("gpu", &gpu), ("extra", "e")])
        } else {
            l(&[("gpu", &gpu), ("UUID", "u")])
        };
        assert_eq!(s.1, want);
    }
    assert_eq!(p.keys.names.len(), 3, "each label name is stored once");
}

#[test]
fn a_hash_shared_by_other_labels_does_not_drop_a_series() {
    let mut p = Page::default();
    p.add("A", "a", PromType::Gauge, &[("gpu", "0")], 1.0);
    // Make {gpu="1"} collide with {gpu="0"}: its hash now leads to the gpu="0" series.
    let mut probe = Store::default();
    let id = p.keys.id(0, "gpu");
    let row = probe.push([(id, "1")].into_iter(), 0.0);
    let hash = label_set_hash(&probe, probe.pairs(&row));
    p.families[0].seen.insert(hash, 0);
    p.add("A", "a", PromType::Gauge, &[("gpu", "1")], 2.0);
    p.add("A", "a", PromType::Gauge, &[("gpu", "1")], 3.0);
    assert_eq!(
        series(&p),
        [
            ("A".into(), l(&[("gpu", "0")]), 1.0),
            ("A".into(), l(&[("gpu", "1")]), 2.0)
        ]
    );
    assert_eq!(p.dropped[&DropReason::Duplicate], 1, "the real duplicate");
}

#[test]
fn a_recycled_page_comes_back_empty_with_its_storage() {
    let mut p = Page::default();
    for i in 0..100 {
        p.add("A", "a", PromType::Gauge, &[("gpu", &i.to_string())], 1.0);
    }
    p.drop_value(DropReason::Sentinel);
    let capacity = p.store.pairs.capacity();
    let spare = Mutex::new(None);
    p.recycle_into(&spare);
    let q = Page::reuse_from(&spare);
    assert_eq!(q.series_count(), 0);
    assert!(q.dropped.is_empty());
    assert_eq!(q.store.pairs.capacity(), capacity);
    // Only one page is kept: the next one is new.
    assert_eq!(Page::reuse_from(&spare).store.pairs.capacity(), 0);
}

/// Two host engines both have a gpu 0: with the engine label they are two series, not a
/// duplicate dropped.
#[test]
fn appended_pages_kept_apart_by_a_label() {
    let engine_page = |v| {
        let mut p = Page::default();
        p.add(
            "T",
            "h",
            PromType::Gauge,
            &[("gpu", "0"), ("UUID", "GPU-0")],
            v,
        );
        p
    };
    let mut all = Page::default();
    all.append_labelled(engine_page(1.0), "engine", "a");
    all.append_labelled(engine_page(2.0), "engine", "b");
    let s = series(&all);
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(s[0].1.last().unwrap(), &("engine".into(), "a".into()));
    assert_eq!((s[1].1.last().unwrap().1.as_str(), s[1].2), ("b", 2.0));
    assert!(all.dropped.is_empty());
    // Without it, the second gpu 0 is a duplicate.
    let mut plain = Page::default();
    plain.append(engine_page(1.0));
    plain.append(engine_page(2.0));
    assert_eq!(series(&plain).len(), 1);
}

/// A window's statistics share one stored label set; each family still checks its own
/// duplicates and conflicts, and the page reads as if each series were added alone.
#[test]
fn series_added_alike_read_as_series_added_alone() {
    let labels = |g| [("gpu", g), ("UUID", "GPU-x")];
    let build = |alike: bool| {
        let mut p = Page::default();
        // `MAX` holds gpu 1 already, and `OTHER` was made with another help.
        p.add("MAX", "max", PromType::Gauge, &labels("1"), 9.0);
        p.add("OTHER", "not s", PromType::Gauge, &[("x", "1")], 0.0);
        let fams = [("MIN", "min"), ("MAX", "max"), ("OTHER", "s")];
        for (g, v) in [("0", 1.0), ("1", 2.0)] {
            let values = [v, v + 10.0, v + 20.0];
            if alike {
                let ids = fams.map(|(n, h)| p.family_id(n, h, PromType::Gauge));
                p.add_alike(&ids, &labels(g), &values);
            } else {
                for ((n, h), v) in fams.iter().zip(values) {
                    p.add(n, h, PromType::Gauge, &labels(g), v);
                }
            }
        }
        p
    };
    let (alike, alone) = (build(true), build(false));
    assert_eq!(series(&alike), series(&alone));
    assert_eq!(alike.dropped, alone.dropped);
    assert_eq!(alike.dropped[&DropReason::Duplicate], 1);
    assert_eq!(alike.dropped[&DropReason::Conflict], 2);
    assert_eq!(
        crate::output::render::encode(&alike),
        crate::output::render::encode(&alone)
    );
    // Shared: MIN and MAX of gpu 0 name one label set; gpu 1's is MIN's alone (MAX had
    // it, OTHER refused it), so not shared; series added alone share nothing.
    let sets = |p: &Page, name: &str| -> Vec<Option<usize>> {
        let f = p.families().find(|f| f.name() == name).unwrap();
        f.series().map(|s| s.shared_labels()).collect()
    };
    assert_eq!(sets(&alike, "MIN"), [Some(0), None]);
    assert_eq!(sets(&alike, "MAX"), [None, Some(0)]);
    assert_eq!(alike.shared_label_sets(), 1);
    assert_eq!(sets(&alone, "MIN"), [None, None]);
    // A series without labels stored just before a shared set is not taken for it.
    let mut e = Page::default();
    e.add("EMPTY", "e", PromType::Gauge, &[], 5.0);
    let ids = ["MIN", "MAX"].map(|n| e.family_id(n, n, PromType::Gauge));
    e.add_alike(&ids, &labels("0"), &[1.0, 2.0]);
    let t = String::from_utf8(crate::output::render::encode(&e)).unwrap();
    assert!(
        t.contains("EMPTY 5\n") && t.contains("MAX{gpu=\"0\",UUID=\"GPU-x\"} 2\n"),
        "{t}"
    );
    // A label name Prometheus refuses drops every series of the set, as alone.
    let mut p = Page::default();
    let ids = [p.family_id("MIN", "min", PromType::Gauge)];
    p.add_alike(&ids, &[("bad-name", "1")], &[1.0]);
    assert_eq!(p.series_count(), 0);
    assert_eq!(p.dropped[&DropReason::InvalidLabelName], 1);
    // Rewritten (attribution), shared series become series of their own, labels and all.
    let mut r = build(true);
    r.rewrite(|_, mut s| {
        s.push_label("pod", "p");
        vec![s]
    });
    assert_eq!(r.shared_label_sets(), 0);
    let t = String::from_utf8(crate::output::render::encode(&r)).unwrap();
    assert!(
        t.contains("MIN{gpu=\"0\",UUID=\"GPU-x\",pod=\"p\"} 1\n"),
        "{t}"
    );
    assert!(
        t.contains("MAX{gpu=\"0\",UUID=\"GPU-x\",pod=\"p\"} 11\n"),
        "{t}"
    );
}
