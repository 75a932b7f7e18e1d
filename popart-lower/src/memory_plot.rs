//! The memory report as an SVG plot ([`Executable::memory_plot`]): planned
//! activation bytes live at each step of the program's timeline, as an area
//! chart with axes and the peak marked; with an `ipu_model` estimate, a second
//! chart of the most loaded tile's bytes at each step against the tile memory.
//!
//! Each chart is a `<g class="chart">` holding a `<rect class="plot-area">`
//! whose `data-x-max` (steps) and `data-y-max` (bytes at the top edge) give the
//! scale, and a `<polyline class="series">` with one point per step, at
//! `x = left + (step + 0.5) / steps * width`, `y = bottom - bytes / y_max * height`.

use std::fmt::Write as _;

use crate::executable::{BufferKind, Executable};
use crate::ipu_model::MemoryModel;

/// Plot area of one chart, in SVG units.
const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 90.0;
const TOP: f64 = 50.0;
/// Vertical room taken by one chart (plot area, title, axis labels).
const CHART_HEIGHT: f64 = HEIGHT + 110.0;

impl Executable {
    /// The live steps of buffer `buffer` (inclusive intervals of the timeline,
    /// in order; empty for variables, constants and an unknown id).
    pub fn live_intervals(&self, buffer: crate::BufferId) -> &[(u64, u64)] {
        self.lives.get(buffer.0 as usize).map_or(&[], Vec::as_slice)
    }

    /// Activation bytes live at each step of the timeline: `steps` values of
    /// [`Executable::memory_report`], the largest its `peak_live_bytes`.
    pub fn live_bytes_per_step(&self) -> Vec<u64> {
        let steps = self.lives.iter().flatten().map(|&(_, e)| e.saturating_add(1)).max().unwrap_or(0);
        let n = usize::try_from(steps).unwrap_or(0);
        // Differences: +size at the start of an interval, -size after its end.
        let mut diff = vec![0i128; n + 1];
        for (b, lives) in self.buffers.iter().zip(&self.lives) {
            if b.kind != BufferKind::Activation {
                continue;
            }
            for &(s, e) in lives {
                let (s, e) = (usize::try_from(s).unwrap_or(n), usize::try_from(e).unwrap_or(n));
                diff[s.min(n)] += b.size as i128;
                diff[e.saturating_add(1).min(n)] -= b.size as i128;
            }
        }
        let mut live = 0i128;
        diff[..n]
            .iter()
            .map(|d| {
                live += d;
                u64::try_from(live).unwrap_or(0)
            })
            .collect()
    }

    /// The memory report as an SVG document: activation bytes live per step
    /// (the peak marked), and with `tiles` (an `ipu_model` estimate of this
    /// executable) the most loaded tile's bytes per step against the tile memory.
    pub fn memory_plot(&self, tiles: Option<&MemoryModel>) -> String {
        let report = self.memory_report();
        let live = self.live_bytes_per_step();
        let charts = 1 + usize::from(tiles.is_some());
        let total_h = CHART_HEIGHT * charts as f64 + 20.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{total_h}\" viewBox=\"0 0 {w} {total_h}\" \
             font-family=\"sans-serif\" font-size=\"12\">",
            w = LEFT + WIDTH + 40.0
        );
        s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
        let title = format!(
            "Planned activation memory per step: peak {} at step {} of {} (arena {}, of which {} variables and \
             constants)",
            human(report.peak_live_bytes as u64),
            report.peak_step,
            report.steps,
            human(report.arena_bytes as u64),
            human(report.permanent_bytes as u64)
        );
        chart(&mut s, 0.0, "live", &title, &live, None);
        if let Some(m) = tiles {
            let per_step = tile_bytes_per_step(m);
            let title = format!(
                "ipu_model: most loaded tile per step: peak {} of {} ({:.1}%) on tile {} at step {}",
                human(m.peak.max_tile_bytes),
                human(m.tile_memory_bytes),
                100.0 * m.peak.max_tile_bytes as f64 / m.tile_memory_bytes.max(1) as f64,
                m.peak.max_tile,
                m.peak.step
            );
            chart(&mut s, CHART_HEIGHT, "tile", &title, &per_step, Some(m.tile_memory_bytes));
        }
        s += "</svg>\n";
        s
    }
}

/// The most loaded tile's bytes at each step of `m` (a point's value holds
/// until the next point).
pub fn tile_bytes_per_step(m: &MemoryModel) -> Vec<u64> {
    let n = usize::try_from(m.steps).unwrap_or(0);
    let mut out = vec![0u64; n];
    for (i, p) in m.points.iter().enumerate() {
        let from = usize::try_from(p.step).unwrap_or(n).min(n);
        let to = m.points.get(i + 1).map_or(n, |q| usize::try_from(q.step).unwrap_or(n).min(n));
        if from < to {
            out[from..to].fill(p.max_tile_bytes);
        }
    }
    out
}

/// One chart at vertical offset `y0`: `values` per step, the largest marked,
/// with a dashed `limit` line when given.
fn chart(s: &mut String, y0: f64, id: &str, title: &str, values: &[u64], limit: Option<u64>) {
    let steps = values.len();
    let max = values.iter().copied().max().unwrap_or(0).max(limit.unwrap_or(0));
    let y_max = nice_ceil(max);
    let (left, top, bottom) = (LEFT, y0 + TOP, y0 + TOP + HEIGHT);
    let x_of = |i: usize| left + (i as f64 + 0.5) / steps.max(1) as f64 * WIDTH;
    let y_of = |b: u64| bottom - b as f64 / y_max as f64 * HEIGHT;
    let _ = writeln!(s, "<g class=\"chart\" id=\"{id}\">");
    let _ = writeln!(s, "<text x=\"{left}\" y=\"{}\" font-size=\"14\">{}</text>", y0 + 25.0, xml(title));
    let _ = writeln!(
        s,
        "<rect class=\"plot-area\" x=\"{left}\" y=\"{top}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"none\" \
         stroke=\"#ccc\" data-x-max=\"{steps}\" data-y-max=\"{y_max}\"/>"
    );
    // Axes with ticks: bytes at 0, 1/4 .. 1 of the top; steps at 0, 1/4 .. the end.
    for q in 0..=4u64 {
        let b = y_max / 4 * q;
        let y = y_of(b);
        let _ = writeln!(
            s,
            "<line x1=\"{}\" y1=\"{y:.2}\" x2=\"{}\" y2=\"{y:.2}\" stroke=\"#eee\"/><text x=\"{}\" y=\"{:.2}\" \
             text-anchor=\"end\">{}</text>",
            left,
            left + WIDTH,
            left - 6.0,
            y + 4.0,
            human(b)
        );
        let step = steps as u64 * q / 4;
        let x = left + step as f64 / steps.max(1) as f64 * WIDTH;
        let _ = writeln!(
            s,
            "<line x1=\"{x:.2}\" y1=\"{bottom}\" x2=\"{x:.2}\" y2=\"{}\" stroke=\"black\"/><text x=\"{x:.2}\" y=\"{}\" \
             text-anchor=\"middle\">{step}</text>",
            bottom + 5.0,
            bottom + 18.0
        );
    }
    let _ = writeln!(s, "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"black\"/>");
    let _ =
        writeln!(s, "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"black\"/>", left + WIDTH);
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">program step (timeline)</text>",
        left + WIDTH / 2.0,
        bottom + 36.0
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">bytes live</text>",
        16.0,
        top + HEIGHT / 2.0
    );
    if steps > 0 {
        let mut pts = String::new();
        for (i, &b) in values.iter().enumerate() {
            let _ = write!(pts, "{:.2},{:.2} ", x_of(i), y_of(b));
        }
        let pts = pts.trim_end();
        let _ = writeln!(
            s,
            "<polygon class=\"area\" points=\"{:.2},{bottom} {pts} {:.2},{bottom}\" fill=\"#9ecae1\" stroke=\"none\"/>",
            x_of(0),
            x_of(steps - 1)
        );
        let _ = writeln!(
            s,
            "<polyline class=\"series\" points=\"{pts}\" fill=\"none\" stroke=\"#3182bd\" stroke-width=\"1.5\"/>"
        );
        // The first step holding the most.
        let (pi, &pb) = values.iter().enumerate().rev().max_by_key(|&(_, &b)| b).unwrap_or((0, &0));
        let _ = writeln!(
            s,
            "<circle class=\"peak\" cx=\"{:.2}\" cy=\"{:.2}\" r=\"4\" fill=\"#de2d26\" data-step=\"{pi}\" \
             data-bytes=\"{pb}\"/><text x=\"{:.2}\" y=\"{:.2}\" fill=\"#de2d26\">peak {} at step {pi}</text>",
            x_of(pi),
            y_of(pb),
            (x_of(pi) + 6.0).min(left + WIDTH - 160.0),
            y_of(pb) - 6.0,
            human(pb)
        );
    }
    if let Some(l) = limit {
        let y = y_of(l);
        let _ = writeln!(
            s,
            "<line class=\"limit\" x1=\"{left}\" y1=\"{y:.2}\" x2=\"{}\" y2=\"{y:.2}\" stroke=\"#636363\" \
             stroke-dasharray=\"6,4\"/><text x=\"{}\" y=\"{:.2}\" text-anchor=\"end\">tile memory {}</text>",
            left + WIDTH,
            left + WIDTH,
            y - 4.0,
            human(l)
        );
    }
    s.push_str("</g>\n");
}

/// The smallest of 1, 2, 5 x 10^k at or above `b` (at least 1; a multiple of 4
/// when at least 4, so the quarter ticks are whole bytes; saturating at `u64::MAX`).
fn nice_ceil(b: u64) -> u64 {
    let mut p = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            let v = p.saturating_mul(m);
            if v >= b || v == u64::MAX {
                return if v >= 4 { v.div_ceil(4).saturating_mul(4) } else { v };
            }
        }
        p = p.saturating_mul(10);
    }
}

/// Bytes with a binary unit.
fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `s` escaped for XML text.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceilings_cover_the_data_in_whole_quarter_ticks() {
        for b in (0..5000u64).chain([u64::MAX / 3, u64::MAX]) {
            let v = nice_ceil(b);
            assert!(v >= b.max(1), "{b}: {v}");
            assert!(v < 4 || v.is_multiple_of(4) || v == u64::MAX, "{b}: {v}");
            // 1, 2, 5 x 10^k: never more than 2.5x the next power step, plus rounding to 4.
            assert!(v <= b.saturating_mul(3).saturating_add(4), "{b}: {v}");
        }
        assert_eq!((nice_ceil(150), nice_ceil(1001)), (200, 2000));
    }
}
