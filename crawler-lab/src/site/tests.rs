use super::*;

#[test]
fn categories_partition_the_catalogue() {
    for seed in [0, 3, 7] {
        let c = Catalogue::new(seed, 1003, Vec::new());
        let total: u32 = (0..CATEGORIES.len()).map(|i| c.category_span(i).1).sum();
        assert_eq!(total, 1003);
        for i in 0..CATEGORIES.len() {
            let (first, _) = c.category_span(i);
            assert_eq!(c.category_of(first), i);
        }
    }
}

#[test]
fn mutation_changes_about_the_fraction_and_moves_validators() {
    let c = Catalogue::new(7, 10_000, Vec::new());
    let before = c.book_validators(1, c.revision(1));
    let changed = c.mutate(0.05);
    assert!((400..600).contains(&changed.len()), "{}", changed.len());
    let id = changed[0];
    assert_eq!(c.revision(id), 1);
    let after = c.book_validators(id, 1);
    assert!(after.last_modified > c.book_modified(id, 0));
    if !changed.contains(&1) {
        assert_eq!(before, c.book_validators(1, c.revision(1)));
    }
}
