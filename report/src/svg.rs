//! A small SVG line chart, enough for bandwidth over time and benchmark
//! bars, with no dependency.

use std::fmt::Write;

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// "Nice" upper bound for an axis.
fn nice_max(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    for step in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if value <= step * magnitude {
            return step * magnitude;
        }
    }
    10.0 * magnitude
}

/// A line chart of `series` with axis labels, 800×400.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let (width, height, left, right, top, bottom) = (800.0, 400.0, 70.0, 20.0, 40.0, 50.0);
    let x_max = nice_max(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(0.0, f64::max));
    let y_max = nice_max(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max) * 1.1);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let x = |v: f64| left + v / x_max * plot_w;
    let y = |v: f64| top + plot_h - v / y_max * plot_h;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    for i in 0..=5 {
        let value = y_max * f64::from(i) / 5.0;
        let (x2, yv, tx, ty, tick) = (width - right, y(value), left - 6.0, y(value) + 4.0, format_tick(value));
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{x2}" y1="{yv}" y2="{yv}" stroke="#ddd"/><text x="{tx}" y="{ty}" text-anchor="end">{tick}</text>"##
        );
        let xv = x_max * f64::from(i) / 5.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            x(xv),
            height - bottom + 18.0,
            format_tick(xv)
        );
    }
    let (axis_bottom, axis_right) = (top + plot_h, width - right);
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" x2="{left}" y1="{top}" y2="{axis_bottom}" stroke="black"/><line x1="{left}" x2="{axis_right}" y1="{axis_bottom}" y2="{axis_bottom}" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + plot_w / 2.0,
        height - 10.0,
        escape(x_label)
    );
    let middle = top + plot_h / 2.0;
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{middle}" text-anchor="middle" transform="rotate(-90 16 {middle})">{}</text>"#,
        escape(y_label)
    );
    for (index, s) in series.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let points: Vec<String> = s.points.iter().map(|&(a, b)| format!("{:.1},{:.1}", x(a), y(b))).collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let ly = top + 16.0 * index as f64 + 8.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="12" height="3" fill="{colour}"/><text x="{}" y="{}">{}</text>"#,
            left + 12.0,
            ly,
            left + 30.0,
            ly + 5.0,
            escape(&s.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Grouped horizontal bars: one group per row, one bar per value.
pub fn bar_chart(title: &str, unit: &str, legends: &[&str], rows: &[(String, Vec<f64>)]) -> String {
    let bar_h = 14.0;
    let group_h = bar_h * legends.len() as f64 + 14.0;
    // Room for the longest row label (about 6.5 px a character at 12 px).
    let longest = rows.iter().map(|(label, _)| label.chars().count()).max().unwrap_or(0);
    let (left, right, top) = ((longest as f64 * 6.5 + 16.0).max(260.0), 120.0, 50.0);
    let width = left + 520.0 + right;
    let height = top + group_h * rows.len() as f64 + 20.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        width / 2.0,
        escape(title)
    );
    for (index, legend) in legends.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let lx = left + 160.0 * index as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{lx}" y="30" width="12" height="10" fill="{colour}"/><text x="{}" y="39">{}</text>"#,
            lx + 16.0,
            escape(legend)
        );
    }
    let plot_w = width - left - right;
    for (row, (label, values)) in rows.iter().enumerate() {
        let y0 = top + group_h * row as f64;
        let max = values.iter().copied().fold(0.0, f64::max).max(f64::MIN_POSITIVE);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            left - 8.0,
            y0 + group_h / 2.0,
            escape(label)
        );
        for (index, &value) in values.iter().enumerate() {
            let colour = COLOURS[index % COLOURS.len()];
            let w = value / max * plot_w;
            let y = y0 + bar_h * index as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{left}" y="{y}" width="{w:.1}" height="{}" fill="{colour}"/><text x="{}" y="{}">{} {}</text>"#,
                bar_h - 2.0,
                left + w + 4.0,
                y + bar_h - 4.0,
                format_tick(value),
                escape(unit)
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// Charts one above the other in one SVG document.
pub fn stack(charts: &[String]) -> String {
    let attribute = |chart: &str, name: &str| -> f64 {
        let tag = chart.split('>').next().unwrap_or_default();
        tag.split(&format!(" {name}=\"")).nth(1).and_then(|rest| rest.split('"').next()?.parse().ok()).unwrap_or(0.0)
    };
    let width = charts.iter().map(|c| attribute(c, "width")).fold(0.0, f64::max);
    let height: f64 = charts.iter().map(|c| attribute(c, "height")).sum();
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let mut y = 0.0;
    for chart in charts {
        // A nested <svg> element, moved down by the charts above it.
        let _ = write!(svg, "{}", chart.replacen("<svg ", &format!("<svg y=\"{y}\" "), 1));
        y += attribute(chart, "height");
    }
    svg.push_str("</svg>\n");
    svg
}

fn format_tick(value: f64) -> String {
    if value >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_svg() {
        let series = vec![Series { label: "a <b>".into(), points: vec![(0.0, 1.0), (1.0, 3.0)] }];
        let svg = line_chart("t", "x", "y", &series);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt;b&gt;"));
        assert!(svg.contains("<polyline"));
        let bars = bar_chart("t", "MiB/s", &["ours", "kernel"], &[("job".into(), vec![2.0, 1.0])]);
        assert_eq!(bars.matches("<rect").count(), 1 + 2 + 2);
        let both = stack(&[bars.clone(), svg.clone()]);
        assert!(both.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" width="900" height="512""#), "{both}");
        assert!(both.contains(r#"<svg y="112" xmlns"#), "{both}");
        assert_eq!(both.matches("<svg").count(), 3);
        assert_eq!(both.matches("</svg>").count(), 3);
    }

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(73.0), 100.0);
        assert_eq!(nice_max(101.0), 200.0);
        assert_eq!(nice_max(2400.0), 2500.0);
    }
}
