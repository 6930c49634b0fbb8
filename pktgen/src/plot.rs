//! Line plots of sweep results (throughput, latency, loss against the swept parameter, one
//! series per value of another axis), as SVG and PNG, made to be read in a report:
//!
//! * **Units on both axes**, and a subtitle with the conditions every number depends on (clock,
//!   profile, mode, workers, frame size, search preset: whatever is not on an axis).
//! * **The x scale fits the parameter** ([`XScale`]): linear, log2 for powers of two (ring
//!   sizes, queue counts), or named categories (datapath modes) at evenly spaced ticks.
//! * **The legend sits beside the plot**, never over the data, and shows each series' line
//!   style (solid or dashed) and marker, so NDR (solid) and PDR (dashed) differ there too.
//! * **Series that coincide stay visible**: each series has its own marker (circle, triangle,
//!   square, diamond, cross in turn), markers of coinciding series are drawn nested from large
//!   to small, and a note says which series coincide.
//! * **The y range shows the differences the figure is about**: a linear axis starts at zero
//!   unless every value lies in a narrow band far above it, and then says so in a note.
//!
//! Text is set in DejaVu Sans (from the `dejavu` crate), rendered by `plotters`' pure-Rust
//! `ab_glyph` backend in PNGs; SVGs carry the text as `<text>` elements. No system font library
//! is needed.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::Path;
use std::sync::Once;

/// Marker of a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// Filled circle.
    Circle,
    /// Filled triangle.
    Triangle,
    /// Filled square.
    Square,
    /// Filled diamond.
    Diamond,
    /// Cross.
    Cross,
}

impl Marker {
    /// The markers in the order series get them.
    pub const ALL: [Marker; 5] = [
        Marker::Circle,
        Marker::Triangle,
        Marker::Square,
        Marker::Diamond,
        Marker::Cross,
    ];
}

/// One plotted series.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label (e.g. the datapath mode and the goal).
    pub name: String,
    /// `(x, y)` points, plotted in x order.
    pub points: Vec<(f64, f64)>,
    /// Dashed line (e.g. PDR beside NDR).
    pub dashed: bool,
    /// Colour index: series with the same index share a colour.
    pub color: usize,
    /// The marker.
    pub marker: Marker,
}

/// How x values are placed.
#[derive(Clone, Debug, PartialEq)]
pub enum XScale {
    /// Linear.
    Linear,
    /// Logarithmic with base 2 (powers of two evenly spaced); every x must be positive.
    Log2,
    /// Named categories at x = 0, 1, 2, ...
    Categories(Vec<String>),
}

/// A line plot.
#[derive(Clone, Debug, PartialEq)]
pub struct LinePlot {
    /// Title above the plot.
    pub title: String,
    /// The conditions of the figure, under the title, one line per `\n` (may be empty).
    pub subtitle: String,
    /// X axis label, with its unit.
    pub x_label: String,
    /// Y axis label, with its unit.
    pub y_label: String,
    /// The series.
    pub series: Vec<Series>,
    /// Logarithmic y axis (latency).
    pub log_y: bool,
    /// The x scale.
    pub x_scale: XScale,
    /// Notes printed under the legend.
    pub notes: Vec<String>,
}

/// The paper-like palette (colour-blind safe, Okabe-Ito).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// Width and height of rendered plots, pixels.
pub const SIZE: (u32, u32) = (1100, 640);
/// Width of the legend column, pixels.
const LEGEND_W: u32 = 300;
/// The font family every text uses.
const FONT: &str = "sans-serif";

/// Registers DejaVu Sans as the plots' font (once per process).
fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TrueType font shipped in the crate; a failure would leave text
        // out, never crash, so it is not fatal.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// Tick label: integers without a fraction, others with up to three decimals and no trailing
/// zeros, tiny values in scientific notation.
fn tick(v: &f64) -> String {
    let a = v.abs();
    if a >= 100.0 || (a - a.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if a >= 0.001 {
        let t = format!("{v:.3}");
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.1e}")
    }
}

/// Groups of series (by index) whose points are the same, each group of two or more.
pub fn coinciding(series: &[Series]) -> Vec<Vec<usize>> {
    let same = |a: &Series, b: &Series| {
        a.points.len() == b.points.len()
            && !a.points.is_empty()
            && a.points.iter().zip(&b.points).all(|(p, q)| {
                (p.0 - q.0).abs() <= 1e-9 * p.0.abs().max(1.0)
                    && (p.1 - q.1).abs() <= 1e-9 * p.1.abs().max(1e-12)
            })
    };
    let mut seen = vec![false; series.len()];
    let mut out = Vec::new();
    for i in 0..series.len() {
        if seen[i] {
            continue;
        }
        let group: Vec<usize> = (i..series.len())
            .filter(|&j| !seen[j] && same(&series[i], &series[j]))
            .collect();
        for &j in &group {
            seen[j] = true;
        }
        if group.len() > 1 {
            out.push(group);
        }
    }
    out
}

impl LinePlot {
    fn finite_points(&self, s: &Series) -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| {
                p.0.is_finite()
                    && p.1.is_finite()
                    && (!self.log_y || p.1 > 0.0)
                    && (self.x_scale != XScale::Log2 || p.0 > 0.0)
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    }

    /// The x and y ranges, and whether the y axis starts above zero to show a narrow band.
    fn ranges(&self) -> ((f64, f64), (f64, f64), bool) {
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| self.finite_points(s))
            .collect();
        let fold = |f: fn(&(f64, f64)) -> f64| {
            pts.iter()
                .map(f)
                .fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
                    (a.0.min(v), a.1.max(v))
                })
        };
        let (mut x0, mut x1) = fold(|p| p.0);
        let (mut y0, mut y1) = fold(|p| p.1);
        if !x0.is_finite() {
            (x0, x1) = (1.0, 2.0);
        }
        match &self.x_scale {
            XScale::Categories(c) => {
                x0 = -0.5;
                x1 = c.len().max(1) as f64 - 0.5;
            }
            XScale::Log2 => {
                x0 /= 1.25;
                x1 *= 1.25;
            }
            XScale::Linear => {
                if x1 <= x0 {
                    (x0, x1) = (x0 - 1.0, x1 + 1.0);
                }
                let pad = (x1 - x0) * 0.04;
                (x0, x1) = (x0 - pad, x1 + pad);
            }
        }
        if !y0.is_finite() {
            (y0, y1) = if self.log_y { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        let mut zoomed = false;
        if self.log_y {
            y0 /= 1.3;
            y1 = (y1 * 1.3).max(y0 * 4.0);
        } else if y1 <= 0.0 {
            (y0, y1) = (0.0, 1.0);
        } else if y0 > 0.0 && (y1 - y0) < 0.25 * y1 && y1 > y0 {
            // Every value within a band of less than a quarter of the largest: zoom to the band
            // so differences show, and say that the axis does not start at zero.
            let span = y1 - y0;
            y0 = (y0 - span * 0.3).max(0.0);
            y1 += span * 0.3;
            zoomed = y0 > 0.0;
        } else {
            y0 = y0.min(0.0);
            y1 *= 1.08;
        }
        ((x0, x1), (y0, y1), zoomed)
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        register_fonts();
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let root = root.margin(12, 8, 12, 12);
        let (w, _) = root.dim_in_pixel();
        let title = root
            .titled(&self.title, (FONT, 26).into_font().style(FontStyle::Bold))
            .map_err(e)?;
        let sub: Vec<&str> = self.subtitle.lines().filter(|l| !l.is_empty()).collect();
        let (head, body) = title.split_vertically(6 + 21 * sub.len() as u32);
        for (i, line) in sub.iter().enumerate() {
            head.draw(&Text::new(
                line.to_string(),
                ((w / 2) as i32, 2 + 21 * i as i32),
                (FONT, 15).into_font().color(&RGBColor(70, 70, 70)).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Top,
                    ),
                ),
            ))
            .map_err(e)?;
        }
        let (plot_area, legend_area) = body.split_horizontally(w.saturating_sub(LEGEND_W));
        let ((x0, x1), (y0, y1), zoomed) = self.ranges();
        let groups = coinciding(&self.series);
        // Markers of series that share a point nest: the first drawn there largest, each later
        // one smaller, so every series at a shared point stays visible.
        let pts_of: Vec<Vec<(f64, f64)>> =
            self.series.iter().map(|s| self.finite_points(s)).collect();
        let same_pt = |a: &(f64, f64), b: &(f64, f64)| {
            (a.0 - b.0).abs() <= 1e-9 * a.0.abs().max(1.0)
                && (a.1 - b.1).abs() <= 1e-9 * a.1.abs().max(1e-12)
        };
        let mut shared_any = false;
        let point_size: Vec<Vec<u32>> = pts_of
            .iter()
            .enumerate()
            .map(|(i, pts)| {
                pts.iter()
                    .map(|p| {
                        let before = pts_of[..i]
                            .iter()
                            .filter(|o| o.iter().any(|q| same_pt(p, q)))
                            .count() as u32;
                        let after = pts_of[i + 1..]
                            .iter()
                            .any(|o| o.iter().any(|q| same_pt(p, q)));
                        if before == 0 && !after {
                            5
                        } else {
                            shared_any = true;
                            11u32.saturating_sub(2 * before).max(3)
                        }
                    })
                    .collect()
            })
            .collect();
        let marker_size = vec![5u32; self.series.len()];
        let mut builder = ChartBuilder::on(&plot_area);
        builder
            .margin(10)
            .x_label_area_size(56)
            .y_label_area_size(84);
        macro_rules! body {
            ($chart:expr, $xfmt:expr, $nx:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .axis_desc_style((FONT, 18))
                    .label_style((FONT, 15))
                    .x_labels($nx)
                    .x_label_formatter($xfmt)
                    .y_label_formatter(&tick)
                    .light_line_style(RGBColor(238, 238, 238))
                    .bold_line_style(RGBColor(215, 215, 215))
                    .draw()
                    .map_err(e)?;
                for (i, s) in self.series.iter().enumerate() {
                    let color = PALETTE[s.color % PALETTE.len()];
                    let pts = pts_of[i].clone();
                    let sized: Vec<((f64, f64), u32)> = pts
                        .iter()
                        .copied()
                        .zip(point_size[i].iter().copied())
                        .collect();
                    let style = Color::stroke_width(&color, 2);
                    if s.dashed {
                        chart
                            .draw_series(DashedLineSeries::new(pts.clone(), 9, 6, style))
                            .map_err(e)?;
                    } else {
                        chart
                            .draw_series(LineSeries::new(pts.clone(), style))
                            .map_err(e)?;
                    }
                    let fill = color.filled();
                    match s.marker {
                        Marker::Circle => {
                            chart.draw_series(sized.iter().map(|&(p, z)| Circle::new(p, z, fill)))
                        }
                        Marker::Triangle => chart.draw_series(
                            sized
                                .iter()
                                .map(|&(p, z)| TriangleMarker::new(p, z + 1, fill)),
                        ),
                        Marker::Square => chart.draw_series(sized.iter().map(|&(p, z)| {
                            let k = z as i32;
                            EmptyElement::at(p)
                                + Rectangle::new([(1 - k, 1 - k), (k - 1, k - 1)], fill)
                        })),
                        Marker::Diamond => chart.draw_series(sized.iter().map(|&(p, z)| {
                            let k = z as i32;
                            EmptyElement::at(p)
                                + Polygon::new(
                                    vec![(0, -k - 1), (k + 1, 0), (0, k + 1), (-k - 1, 0)],
                                    fill,
                                )
                        })),
                        Marker::Cross => chart.draw_series(
                            sized
                                .iter()
                                .map(|&(p, z)| Cross::new(p, z, Color::stroke_width(&color, 2))),
                        ),
                    }
                    .map_err(e)?;
                }
            }};
        }
        let cats: Vec<String> = match &self.x_scale {
            XScale::Categories(c) => c.clone(),
            _ => Vec::new(),
        };
        let cat_fmt = |v: &f64| -> String {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                cats.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        match (&self.x_scale, self.log_y) {
            (XScale::Log2, true) => body!(
                builder
                    .build_cartesian_2d((x0..x1).log_scale().base(2.0), (y0..y1).log_scale())
                    .map_err(e)?,
                &tick,
                12
            ),
            (XScale::Log2, false) => body!(
                builder
                    .build_cartesian_2d((x0..x1).log_scale().base(2.0), y0..y1)
                    .map_err(e)?,
                &tick,
                12
            ),
            (XScale::Categories(_), true) => body!(
                builder
                    .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                    .map_err(e)?,
                &cat_fmt,
                cats.len() * 2 + 1
            ),
            (XScale::Categories(_), false) => body!(
                builder.build_cartesian_2d(x0..x1, y0..y1).map_err(e)?,
                &cat_fmt,
                cats.len() * 2 + 1
            ),
            (XScale::Linear, true) => body!(
                builder
                    .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                    .map_err(e)?,
                &tick,
                10
            ),
            (XScale::Linear, false) => body!(
                builder.build_cartesian_2d(x0..x1, y0..y1).map_err(e)?,
                &tick,
                10
            ),
        }
        // The legend beside the plot: line style and marker of every series, then the notes.
        let mut y = 40;
        let font = (FONT, 15).into_font();
        for (i, s) in self.series.iter().enumerate() {
            let color = PALETTE[s.color % PALETTE.len()];
            let style = Color::stroke_width(&color, 2);
            if s.dashed {
                for (a, b) in [(10, 19), (25, 34), (40, 46)] {
                    legend_area
                        .draw(&PathElement::new(vec![(a, y), (b, y)], style))
                        .map_err(e)?;
                }
            } else {
                legend_area
                    .draw(&PathElement::new(vec![(10, y), (46, y)], style))
                    .map_err(e)?;
            }
            let (size, fill) = (marker_size[i].min(6), color.filled());
            let k = size as i32;
            let p = (28, y);
            match s.marker {
                Marker::Circle => legend_area.draw(&Circle::new(p, size, fill)),
                Marker::Triangle => legend_area.draw(&TriangleMarker::new(p, size + 1, fill)),
                Marker::Square => legend_area.draw(&Rectangle::new(
                    [(p.0 + 1 - k, p.1 + 1 - k), (p.0 + k - 1, p.1 + k - 1)],
                    fill,
                )),
                Marker::Diamond => legend_area.draw(&Polygon::new(
                    vec![
                        (p.0, p.1 - k - 1),
                        (p.0 + k + 1, p.1),
                        (p.0, p.1 + k + 1),
                        (p.0 - k - 1, p.1),
                    ],
                    fill,
                )),
                Marker::Cross => {
                    legend_area.draw(&Cross::new(p, size, Color::stroke_width(&color, 2)))
                }
            }
            .map_err(e)?;
            legend_area
                .draw(&Text::new(
                    s.name.clone(),
                    (56, y - 8),
                    font.clone().color(&BLACK),
                ))
                .map_err(e)?;
            y += 24;
        }
        let mut notes = self.notes.clone();
        for g in &groups {
            notes.push(format!(
                "{} series coincide: {}",
                g.len(),
                g.iter()
                    .map(|&i| self.series[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if shared_any && groups.is_empty() {
            notes.push("nested markers: series that share a point".to_string());
        } else if shared_any {
            notes
                .push("nested markers: series that share a point, largest drawn first".to_string());
        }
        if zoomed {
            notes.push(format!("y axis starts at {}, not 0", tick(&y0)));
        }
        y += 12;
        let note_font = (FONT, 14).into_font().color(&RGBColor(60, 60, 60));
        for n in &notes {
            for line in wrap(n, 36) {
                legend_area
                    .draw(&Text::new(line, (10, y), note_font.clone()))
                    .map_err(e)?;
                y += 19;
            }
            y += 6;
        }
        root.present().map_err(e)?;
        Ok(())
    }

    /// Renders the plot as an SVG file.
    pub fn save_svg(&self, path: &Path) -> Result<(), String> {
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        self.draw(root)
            .map_err(|e| format!("plot {}: {e}", path.display()))
    }

    /// Renders the plot as a PNG file.
    pub fn save_png(&self, path: &Path) -> Result<(), String> {
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        self.draw(root)
            .map_err(|e| format!("plot {}: {e}", path.display()))
    }
}

/// Splits `text` into lines of at most about `width` characters at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split(' ') {
        if !cur.is_empty() && cur.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: Vec<(f64, f64)>, dashed: bool, i: usize) -> Series {
        Series {
            name: name.into(),
            points,
            dashed,
            color: i,
            marker: Marker::ALL[i % Marker::ALL.len()],
        }
    }

    #[test]
    fn renders_svg_and_png_with_a_vector_font() {
        let dir = std::env::temp_dir().join(format!("pktgen-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plot = LinePlot {
            title: "NDR vs frame size".into(),
            subtitle: "clock virtual, profile cx5".into(),
            x_label: "frame size (B)".into(),
            y_label: "throughput (Gb/s, L1)".into(),
            series: vec![
                series("host", vec![(64.0, 20.0), (1518.0, 60.0)], false, 0),
                series("nic-inline", vec![(64.0, 30.0), (1518.0, 100.0)], true, 1),
            ],
            log_y: false,
            x_scale: XScale::Linear,
            notes: vec!["a note".into()],
        };
        let svg = dir.join("t.svg");
        let png = dir.join("t.png");
        plot.save_svg(&svg).unwrap();
        plot.save_png(&png).unwrap();
        let s = std::fs::read_to_string(&svg).unwrap();
        assert!(s.contains("<svg") && s.contains("nic-inline") && s.contains("frame size (B)"));
        assert!(s.contains("clock virtual") && s.contains("a note"));
        let p = std::fs::read(&png).unwrap();
        assert_eq!(&p[1..4], b"PNG");
        assert!(p.len() > 10_000, "{}", p.len());
        let log = LinePlot {
            log_y: true,
            x_scale: XScale::Log2,
            series: vec![series(
                "x",
                vec![(64.0, 0.0), (128.0, 1e-3), (4096.0, 0.5)],
                false,
                0,
            )],
            ..plot.clone()
        };
        log.save_png(&dir.join("l.png")).unwrap();
        let cat = LinePlot {
            x_scale: XScale::Categories(vec!["host".into(), "split".into()]),
            series: vec![series("x", vec![(0.0, 1.0), (1.0, 2.0)], false, 0)],
            ..plot
        };
        cat.save_svg(&dir.join("c.svg")).unwrap();
        let c = std::fs::read_to_string(dir.join("c.svg")).unwrap();
        assert!(
            c.contains(">split<") || c.contains("split"),
            "category labels"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn coinciding_series_are_found() {
        let a = series("a", vec![(1.0, 2.0), (2.0, 3.0)], false, 0);
        let b = series("b", vec![(1.0, 2.0), (2.0, 3.0)], false, 1);
        let c = series("c", vec![(1.0, 2.0), (2.0, 4.0)], false, 2);
        let d = series("d", vec![(1.0, 2.0), (2.0, 3.0)], true, 3);
        assert_eq!(coinciding(&[a, b, c, d]), vec![vec![0, 1, 3]]);
        assert!(coinciding(&[]).is_empty());
    }

    #[test]
    fn a_narrow_band_is_zoomed_and_said() {
        let p = LinePlot {
            title: String::new(),
            subtitle: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            series: vec![series("a", vec![(1.0, 98.0), (2.0, 99.5)], false, 0)],
            log_y: false,
            x_scale: XScale::Linear,
            notes: vec![],
        };
        let (_, (y0, y1), zoomed) = p.ranges();
        assert!(zoomed && y0 > 90.0 && y1 > 99.5, "{y0} {y1}");
        let wide = LinePlot {
            series: vec![series("a", vec![(1.0, 10.0), (2.0, 99.5)], false, 0)],
            ..p
        };
        let (_, (y0, _), zoomed) = wide.ranges();
        assert!(!zoomed && y0 == 0.0);
    }
}
