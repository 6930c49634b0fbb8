//! Line plots of sweep results (throughput, latency, loss against the swept parameter, one
//! series per mode), as SVG and PNG, in the style of the paper's figures: white background,
//! light grid, one coloured line with markers per series, legend in the corner.
//!
//! Drawn with `plotters` built **without** its `ttf` feature (which needs the system's
//! fontconfig and freetype): SVG text is emitted as `<text>` elements and rendered by the viewer;
//! PNG text is rasterised here from the public-domain 8x8 glyphs of the `font8x8` crate, scaled
//! to the requested size, through [`GlyphText`], a wrapper around plotters' bitmap backend that
//! overrides only text drawing and measuring. So the default build needs no system package.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind, FontTransform,
    text_anchor::{HPos, VPos},
};
use std::path::Path;

/// One plotted series.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label (e.g. the datapath mode).
    pub name: String,
    /// `(x, y)` points, plotted in x order.
    pub points: Vec<(f64, f64)>,
    /// Dashed line (e.g. PDR beside NDR).
    pub dashed: bool,
    /// Colour index: series with the same index share a colour.
    pub color: usize,
}

/// A line plot.
#[derive(Clone, Debug, PartialEq)]
pub struct LinePlot {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The series.
    pub series: Vec<Series>,
    /// Logarithmic y axis (latency, loss).
    pub log_y: bool,
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
pub const SIZE: (u32, u32) = (960, 600);

impl LinePlot {
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let pts = || self.series.iter().flat_map(|s| s.points.iter());
        let fold = |f: fn(&(f64, f64)) -> f64| {
            pts()
                .map(f)
                .filter(|v| v.is_finite())
                .fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
                    (a.0.min(v), a.1.max(v))
                })
        };
        let (mut x0, mut x1) = fold(|p| p.0);
        let (mut y0, mut y1) = fold(|p| p.1);
        if !x0.is_finite() {
            (x0, x1) = (0.0, 1.0);
        }
        if !y0.is_finite() {
            (y0, y1) = (0.0, 1.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if self.log_y {
            let pos = pts()
                .map(|p| p.1)
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min);
            y0 = if pos.is_finite() { pos / 2.0 } else { 1e-6 };
            y1 = (y1 * 2.0).max(y0 * 10.0);
        } else {
            y0 = y0.min(0.0);
            y1 = if y1 <= y0 { y0 + 1.0 } else { y1 * 1.08 };
        }
        ((x0, x1), (y0, y1))
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let ((x0, x1), (y0, y1)) = self.ranges();
        let pad = (x1 - x0) * 0.03;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(&self.title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(90);
        macro_rules! body {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .axis_desc_style(("sans-serif", 18))
                    .label_style(("sans-serif", 16))
                    .x_label_formatter(&tick)
                    .y_label_formatter(&tick)
                    .light_line_style(RGBColor(235, 235, 235))
                    .bold_line_style(RGBColor(215, 215, 215))
                    .draw()
                    .map_err(e)?;
                for s in &self.series {
                    let color = PALETTE[s.color % PALETTE.len()];
                    let mut pts: Vec<(f64, f64)> = s
                        .points
                        .iter()
                        .copied()
                        .filter(|p| {
                            p.0.is_finite() && p.1.is_finite() && (!self.log_y || p.1 > 0.0)
                        })
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let style = Color::stroke_width(&color, 2);
                    let anno = if s.dashed {
                        chart
                            .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
                            .map_err(e)?
                    } else {
                        chart
                            .draw_series(LineSeries::new(pts.clone(), style))
                            .map_err(e)?
                    };
                    anno.label(s.name.as_str()).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 24, y)], Color::stroke_width(&color, 2))
                    });
                    let marker = if s.dashed {
                        chart.draw_series(
                            pts.iter()
                                .map(|&p| TriangleMarker::new(p, 5, color.filled())),
                        )
                    } else {
                        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    };
                    marker.map_err(e)?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.9))
                    .border_style(RGBColor(160, 160, 160))
                    .label_font(("sans-serif", 16))
                    .position(SeriesLabelPosition::LowerRight)
                    .draw()
                    .map_err(e)?;
            }};
        }
        if self.log_y {
            body!(
                builder
                    .build_cartesian_2d(x0 - pad..x1 + pad, (y0..y1).log_scale())
                    .map_err(e)?
            );
        } else {
            body!(
                builder
                    .build_cartesian_2d(x0 - pad..x1 + pad, y0..y1)
                    .map_err(e)?
            );
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

    /// Renders the plot as a PNG file (text drawn with the built-in 8x8 font).
    pub fn save_png(&self, path: &Path) -> Result<(), String> {
        let root = GlyphText(BitMapBackend::new(path, SIZE)).into_drawing_area();
        self.draw(root)
            .map_err(|e| format!("plot {}: {e}", path.display()))
    }
}

/// A drawing backend that delegates to `B` but draws text with the built-in 8x8 bitmap font, so
/// bitmap output needs no font library.
pub struct GlyphText<B>(pub B);

/// Pixel scale of the 8x8 glyphs for a font of `size` points.
fn glyph_scale(size: f64) -> i32 {
    if size < 17.0 {
        1
    } else if size < 26.0 {
        2
    } else {
        3
    }
}

/// Tick label: integers without a fraction, others with up to three significant decimals.
fn tick(v: &f64) -> String {
    let a = v.abs();
    if a >= 100.0 || (a - a.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else if a >= 0.001 || a == 0.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.1e}")
    }
}

fn glyph(c: char) -> [u8; 8] {
    let i = c as usize;
    font8x8::legacy::BASIC_LEGACY
        .get(i)
        .copied()
        .unwrap_or(font8x8::legacy::BASIC_LEGACY[b'?' as usize])
}

impl<B: DrawingBackend> DrawingBackend for GlyphText<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.present()
    }
    fn draw_pixel(
        &mut self,
        p: BackendCoord,
        c: BackendColor,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_pixel(p, c)
    }
    fn draw_line<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_line(a, b, s)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_rect(a, b, s, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        s: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_path(path, s)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        c: BackendCoord,
        r: u32,
        s: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_circle(c, r, s, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        v: I,
        s: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.fill_polygon(v, s)
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<B::ErrorType>> {
        let k = glyph_scale(style.size()) as u32;
        Ok((text.chars().count() as u32 * 8 * k, 8 * k))
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let k = glyph_scale(style.size());
        let width = text.chars().count() as i32 * 8 * k;
        let height = 8 * k;
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        for (ci, c) in text.chars().enumerate() {
            let g = glyph(c);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..8 {
                    if bits >> col & 1 == 0 {
                        continue;
                    }
                    for sy in 0..k {
                        for sx in 0..k {
                            let x = ci as i32 * 8 * k + col * k + sx + dx;
                            let y = row as i32 * k + sy + dy;
                            let (x, y) = match &trans {
                                FontTransform::None => (x, y),
                                t => t.transform(x, y),
                            };
                            let (x, y) = (pos.0 + x, pos.1 + y);
                            if x >= 0 && y >= 0 && (x as u32) < w && (y as u32) < h {
                                self.0.draw_pixel((x, y), color)?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_svg_and_png_without_system_fonts() {
        let dir = std::env::temp_dir().join(format!("pktgen-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plot = LinePlot {
            title: "NDR vs frame size".into(),
            x_label: "frame size (B)".into(),
            y_label: "throughput (Gb/s)".into(),
            series: vec![
                Series {
                    name: "host".into(),
                    points: vec![(64.0, 20.0), (1518.0, 60.0)],
                    dashed: false,
                    color: 0,
                },
                Series {
                    name: "nic-inline".into(),
                    points: vec![(64.0, 30.0), (1518.0, 100.0)],
                    dashed: true,
                    color: 1,
                },
            ],
            log_y: false,
        };
        let svg = dir.join("t.svg");
        let png = dir.join("t.png");
        plot.save_svg(&svg).unwrap();
        plot.save_png(&png).unwrap();
        let s = std::fs::read_to_string(&svg).unwrap();
        assert!(s.contains("<svg") && s.contains("nic-inline") && s.contains("frame size"));
        let p = std::fs::read(&png).unwrap();
        assert_eq!(&p[1..4], b"PNG");
        assert!(p.len() > 5_000, "{}", p.len());
        let log = LinePlot {
            log_y: true,
            series: vec![Series {
                points: vec![(1.0, 0.0), (2.0, 1e-3), (3.0, 0.5)],
                ..plot.series[0].clone()
            }],
            ..plot
        };
        log.save_png(&dir.join("l.png")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
