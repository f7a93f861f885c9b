//! The shape of a bandwidth series, one value per interval.

/// The mean of the last 10% of `values` over the mean of the first 10%
/// (at least one each): 1.0 is flat. `None` for fewer than two values or
/// a first tenth of zero.
pub fn flatness(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let k = (values.len() / 10).max(1);
    let first: f64 = values[..k].iter().sum::<f64>() / k as f64;
    let last: f64 = values[values.len() - k..].iter().sum::<f64>() / k as f64;
    (first > 0.0).then(|| last / first)
}

/// The steady state: the mean of the second half of `values`. Writes run
/// fast for their first seconds on the rig's platform and then level off,
/// so a whole-run mean mixes two regimes. `None` for fewer than two.
pub fn steady(values: &[f64]) -> Option<f64> {
    let half = &values[values.len() / 2..];
    (values.len() >= 2).then(|| half.iter().sum::<f64>() / half.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flatness_compares_the_last_tenth_with_the_first() {
        assert_eq!(flatness(&[]), None);
        assert_eq!(flatness(&[5.0]), None);
        assert_eq!(flatness(&[2.0, 1.0]), Some(0.5));
        let mut values = vec![100.0; 20];
        values[0] = 50.0;
        values[1] = 50.0;
        assert_eq!(flatness(&values), Some(2.0));
        assert_eq!(flatness(&[0.0, 1.0]), None);
    }

    #[test]
    fn steady_is_the_second_half() {
        assert_eq!(steady(&[1.0]), None);
        assert_eq!(steady(&[9.0, 3.0]), Some(3.0));
        assert_eq!(steady(&[9.0, 9.0, 2.0, 4.0]), Some(3.0));
        assert_eq!(steady(&[9.0, 2.0, 4.0]), Some(3.0));
    }
}
