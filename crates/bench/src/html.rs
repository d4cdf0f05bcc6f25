//! The HTML report format: one self-contained file (inline CSS, inline SVG charts, a few lines
//! of inline script) that opens offline. Commands describe their report as a `Page` of
//! sections, tables and charts; only this module knows how they are drawn.
//!
//! The script checks, once the page has laid out, that every chart drew its series, and
//! records the count in `<body data-charts-rendered>` (a chart that drew nothing is reported
//! with `console.error`), so a headless browser can tell a rendered report from a broken one.

use std::fmt::Write as _;
use std::path::Path;

use crate::BenchError;

pub struct Page {
    pub title: String,
    pub sections: Vec<Section>,
}

#[derive(Default)]
pub struct Section {
    pub heading: String,
    pub paragraphs: Vec<String>,
    pub table: Option<Table>,
    pub charts: Vec<Chart>,
}

pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The same table for a terminal or a Markdown note.
    pub fn markdown(&self) -> Vec<String> {
        let row = |cells: &[String]| format!("| {} |", cells.join(" | "));
        let mut lines = vec![
            row(&self.header),
            format!("|{}", "---|".repeat(self.header.len())),
        ];
        lines.extend(self.rows.iter().map(|cells| row(cells)));
        lines
    }
}

/// How an axis maps values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Base 10; values at or below zero are left out.
    Log,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub y_scale: Scale,
    /// Tick positions and labels for the x axis; None: chosen from the data.
    pub x_ticks: Option<Vec<(f64, String)>>,
    pub series: Vec<Series>,
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Chart {
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Chart {
        Chart {
            title: title.to_owned(),
            x_label: x_label.to_owned(),
            y_label: y_label.to_owned(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            x_ticks: None,
            series: Vec::new(),
        }
    }

    pub fn log_y(mut self) -> Chart {
        self.y_scale = Scale::Log;
        self
    }

    pub fn with_series(mut self, name: &str, points: Vec<(f64, f64)>) -> Chart {
        self.series.push(Series {
            name: name.to_owned(),
            points,
        });
        self
    }
}

pub fn write(path: &Path, page: &Page) -> Result<(), BenchError> {
    crate::write_file(path, render(page).as_bytes())
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:.85em;margin:1em 0}\
td,th{border:1px solid #ccc;padding:.25em .5em;text-align:right}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
.charts{display:flex;flex-wrap:wrap;gap:1em}svg.chart{background:#fff;border:1px solid #ddd}\
svg text{font-size:11px;fill:#333}svg .title{font-size:13px;font-weight:600}\
svg .grid{stroke:#eee}svg .axis{stroke:#999}";

const CHECK: &str = "window.addEventListener('load',function(){var n=0;\
document.querySelectorAll('svg.chart').forEach(function(svg){\
var drawn=svg.querySelectorAll('polyline,circle').length;var box=svg.getBoundingClientRect();\
if(drawn>0&&box.width>0&&box.height>0){n++}else{console.error('chart drew nothing: '+svg.getAttribute('data-title'))}});\
document.body.setAttribute('data-charts-rendered',String(n));});";

pub fn render(page: &Page) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <link rel=\"icon\" href=\"data:,\"><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        escape(&page.title),
        escape(&page.title)
    );
    for section in &page.sections {
        let _ = writeln!(html, "<h2>{}</h2>", escape(&section.heading));
        for paragraph in &section.paragraphs {
            let _ = writeln!(html, "<p>{}</p>", escape(paragraph));
        }
        if let Some(table) = &section.table {
            html.push_str(&table_html(table));
        }
        if !section.charts.is_empty() {
            html.push_str("<div class=\"charts\">\n");
            for chart in &section.charts {
                html.push_str(&svg(chart));
            }
            html.push_str("</div>\n");
        }
    }
    let _ = write!(html, "<script>{CHECK}</script>\n</body></html>\n");
    html
}

fn table_html(table: &Table) -> String {
    let mut html = String::from("<table><thead><tr>");
    for cell in &table.header {
        let _ = write!(html, "<th>{}</th>", escape(cell));
    }
    html.push_str("</tr></thead><tbody>\n");
    for row in &table.rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{}</td>", escape(cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody></table>\n");
    html
}

pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 340.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
/// Legend names longer than this are cut (the whole name is the entry's tooltip).
const LEGEND_CHARS_MAX: usize = 30;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// A mapping from values to pixels along one axis.
#[derive(Clone, Copy, Debug)]
struct Axis {
    scale: Scale,
    low: f64,
    high: f64,
    from_px: f64,
    to_px: f64,
}

impl Axis {
    fn of(scale: Scale, values: impl Iterator<Item = f64>, from_px: f64, to_px: f64) -> Axis {
        let usable: Vec<f64> = values
            .filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0))
            .map(|v| forward(scale, v))
            .collect();
        let mut low = usable.iter().copied().fold(f64::INFINITY, f64::min);
        let mut high = usable.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !low.is_finite() {
            (low, high) = (0.0, 1.0);
        }
        if scale == Scale::Linear {
            // Throughput and latency read best from zero.
            low = low.min(0.0);
            high = nice_ceiling(high);
        } else {
            low = low.floor();
            high = high.ceil();
        }
        if high <= low {
            high = low + 1.0;
        }
        Axis {
            scale,
            low,
            high,
            from_px,
            to_px,
        }
    }

    fn px(&self, value: f64) -> f64 {
        let t = (forward(self.scale, value) - self.low) / (self.high - self.low);
        self.from_px + t * (self.to_px - self.from_px)
    }

    fn usable(&self, value: f64) -> bool {
        value.is_finite() && (self.scale == Scale::Linear || value > 0.0)
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        match self.scale {
            Scale::Log => {
                let mut ticks = Vec::new();
                let mut exponent = self.low;
                while exponent <= self.high + 1e-9 {
                    let value = 10f64.powf(exponent);
                    ticks.push((value, number(value)));
                    exponent += 1.0;
                }
                ticks
            }
            Scale::Linear => {
                let step = nice_step((self.high - self.low) / 5.0);
                let mut ticks = Vec::new();
                let mut value = (self.low / step).ceil() * step;
                while value <= self.high + step * 1e-9 {
                    ticks.push((value, number(value)));
                    value += step;
                }
                ticks
            }
        }
    }
}

fn forward(scale: Scale, value: f64) -> f64 {
    match scale {
        Scale::Linear => value,
        Scale::Log => value.log10(),
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * power)
}

fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 {
        return 1.0;
    }
    let step = nice_step(value / 5.0);
    (value / step).ceil() * step
}

/// `12k`, `1.5M`, `0.25`, `3`.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    let trimmed = |text: String| {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            text
        }
    };
    if magnitude >= 1e6 {
        format!("{}M", trimmed(format!("{:.1}", value / 1e6)))
    } else if magnitude >= 1e4 {
        format!("{}k", trimmed(format!("{:.1}", value / 1e3)))
    } else if magnitude >= 1.0 || magnitude == 0.0 {
        trimmed(format!("{value:.1}"))
    } else {
        trimmed(format!("{value:.3}"))
    }
}

fn svg(chart: &Chart) -> String {
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let x = Axis::of(chart.x_scale, xs, LEFT, WIDTH - RIGHT);
    let y = Axis::of(chart.y_scale, ys, HEIGHT - BOTTOM, TOP);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg class=\"chart\" data-title=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">\
         <text class=\"title\" x=\"{LEFT}\" y=\"18\">{}</text>",
        escape(&chart.title),
        escape(&chart.title)
    );
    draw_grid(&mut svg, chart, &x, &y);
    draw_axes(&mut svg, chart);
    for (index, series) in chart.series.iter().enumerate() {
        draw_series(&mut svg, index, series, &x, &y);
    }
    svg.push_str("</svg>\n");
    svg
}

/// A grid line and a label at every tick of both axes.
fn draw_grid(svg: &mut String, chart: &Chart, x: &Axis, y: &Axis) {
    let x_ticks = chart.x_ticks.clone().unwrap_or_else(|| x.ticks());
    for (value, label) in x_ticks.iter().filter(|(v, _)| x.usable(*v)) {
        let px = x.px(*value);
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 15.0,
            escape(label)
        );
    }
    for (value, label) in y.ticks() {
        let py = y.px(value);
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 5.0,
            py + 4.0,
            escape(&label)
        );
    }
}

/// The two axis lines and their labels.
fn draw_axes(svg: &mut String, chart: &Chart) {
    let _ = write!(
        svg,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{0:.1}\"/>\
         <text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"middle\">{4}</text>\
         <text transform=\"translate(14 {5:.1}) rotate(-90)\" text-anchor=\"middle\">{6}</text>",
        HEIGHT - BOTTOM,
        WIDTH - RIGHT,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 12.0,
        escape(&chart.x_label),
        (TOP + HEIGHT - BOTTOM) / 2.0,
        escape(&chart.y_label)
    );
}

/// One series: its line, its markers when sparse, and its legend entry, in the `index`th
/// color.
fn draw_series(svg: &mut String, index: usize, series: &Series, x: &Axis, y: &Axis) {
    let color = COLORS[index % COLORS.len()];
    let points: Vec<(f64, f64)> = series
        .points
        .iter()
        .filter(|(px, py)| x.usable(*px) && y.usable(*py))
        .map(|(px, py)| (x.px(*px), y.px(*py)))
        .collect();
    if points.len() > 1 {
        let path: Vec<String> = points
            .iter()
            .map(|(px, py)| format!("{px:.1},{py:.1}"))
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.8\" points=\"{}\"/>",
            path.join(" ")
        );
    }
    // Markers for sparse series (a sweep's points), none for long time series.
    if points.len() <= 40 {
        for (px, py) in &points {
            let _ = write!(
                svg,
                "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"2.5\" fill=\"{color}\"/>"
            );
        }
    }
    let legend_y = TOP + 14.0 * index as f64;
    let mut shown: String = series.name.chars().take(LEGEND_CHARS_MAX).collect();
    if shown.len() < series.name.len() {
        shown.push('…');
    }
    let _ = write!(
        svg,
        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\"><title>{}</title>{}</text>",
        WIDTH - RIGHT + 10.0,
        legend_y,
        WIDTH - RIGHT + 25.0,
        legend_y + 9.0,
        escape(&series.name),
        escape(&shown)
    );
}

/// x positions for a latency percentile curve: "nines" (p50 at 0.3, p90 at 1, p99 at 2 ...),
/// so the tail gets as much room as the median.
pub fn nines(percentile: f64) -> f64 {
    -(1.0 - percentile / 100.0).max(1e-9).log10()
}

pub fn nines_ticks() -> Vec<(f64, String)> {
    [50.0, 90.0, 99.0, 99.9, 99.99]
        .iter()
        .map(|p| (nines(*p), format!("p{p}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Page {
        Page {
            title: "T <1>".into(),
            sections: vec![Section {
                heading: "S & S".into(),
                paragraphs: vec!["a \"quoted\" note".into()],
                table: Some(Table {
                    header: vec!["a".into(), "b".into()],
                    rows: vec![vec!["1".into(), "<2>".into()]],
                }),
                charts: vec![
                    Chart::new("tps", "threads", "msg/s")
                        .with_series("1024 B", vec![(1.0, 10.0), (2.0, 30.0), (4.0, 35.0)]),
                    Chart::new("latency", "percentile", "ms")
                        .log_y()
                        .with_series("run", vec![(0.3, 0.2), (2.0, 3.0), (0.5, 0.0)]),
                ],
            }],
        }
    }

    #[test]
    fn a_page_is_self_contained_and_escaped() {
        let html = render(&page());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<title>T &lt;1&gt;</title>"));
        assert!(html.contains("<h2>S &amp; S</h2>"));
        assert!(html.contains("<td>&lt;2&gt;</td>"));
        assert_eq!(html.matches("<svg class=\"chart\"").count(), 2);
        assert_eq!(html.matches("<polyline").count(), 2);
        assert!(!html.contains("src=\"http"), "nothing fetched");
        assert!(!html.contains("<script src"), "no external script");
    }

    #[test]
    fn axes_map_linear_and_log_values_into_the_plot() {
        let linear = Axis::of(Scale::Linear, [3.0, 47.0].into_iter(), 0.0, 100.0);
        assert_eq!((linear.low, linear.high), (0.0, 50.0));
        assert_eq!(linear.px(25.0), 50.0);
        let log = Axis::of(Scale::Log, [0.2, 30.0, 0.0].into_iter(), 0.0, 300.0);
        assert_eq!(
            (log.low, log.high),
            (-1.0, 2.0),
            "zero is left out of a log axis"
        );
        assert!((log.px(1.0) - 100.0).abs() < 1e-9);
        let labels: Vec<String> = log.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, vec!["0.1", "1", "10", "100"]);
        assert_eq!(number(126_170.0), "126.2k");
        assert_eq!(number(2_500_000.0), "2.5M");
        assert_eq!(number(0.25), "0.25");
        assert!((nines(99.0) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn an_empty_chart_still_draws_its_axes() {
        let html = svg(&Chart::new("nothing", "x", "y"));
        assert!(html.contains("class=\"axis\""));
        assert!(!html.contains("<polyline"));
    }
}
