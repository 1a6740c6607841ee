//! The programs' results: the parts of a `result.json` that `repro` reads, the recipe's metric
//! in it, and the metric and the tables averaged over the seeds.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Deserializer, Serialize};

/// One split of a program's `result.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct SplitResult {
    /// Accuracy as a fraction.
    pub accuracy: Option<f64>,
}

/// One row of a table of a program's `result.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct TableRow {
    /// The row's key (a file name, an operator count…), numbers written as text.
    #[serde(deserialize_with = "key_string")]
    pub key: String,
    /// Accuracy as a fraction.
    pub accuracy: Option<f64>,
}

/// One table of a program's `result.json` (accuracy by file, by operator count…).
#[derive(Debug, Clone, Deserialize)]
pub struct ResultTable {
    /// Its title.
    pub title: String,
    /// The split it breaks down.
    pub split: Option<String>,
    /// What the row keys are (`file`, `operators`).
    pub key: Option<String>,
    /// The rows.
    #[serde(default)]
    pub rows: Vec<TableRow>,
}

/// The parts of a program's `result.json` that `repro` reads (the record keeps all of it).
#[derive(Debug, Clone, Deserialize)]
pub struct RunResult {
    /// The encoder that was trained.
    pub encoder: Option<String>,
    /// The device it ran on (`auto` resolved: `cuda:0`, `flex`).
    #[serde(default)]
    pub device: Option<String>,
    /// Scores per split.
    pub splits: BTreeMap<String, SplitResult>,
    /// Breakdowns.
    #[serde(default)]
    pub tables: Vec<ResultTable>,
}

fn key_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    })
}

/// Reads `path` (a program's `result.json`): the whole document and the parts repro uses.
pub fn read_result(path: &Path) -> Result<(serde_json::Value, RunResult)> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "could not read {} (the program should write it at the end of a run)",
            path.display()
        )
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let result: RunResult = serde_json::from_value(value.clone())
        .with_context(|| format!("{}: not a result.json", path.display()))?;
    Ok((value, result))
}

/// The accuracy of split `metric` in `result` (read from `path`).
pub fn metric_accuracy(result: &RunResult, metric: &str, path: &Path) -> Result<f64> {
    let Some(split) = result.splits.get(metric) else {
        let names: Vec<&str> = result.splits.keys().map(String::as_str).collect();
        bail!(
            "{}: no split '{metric}' (the recipe's metric); the splits are: {}",
            path.display(),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        );
    };
    let Some(a) = split.accuracy.filter(|a| a.is_finite()) else {
        bail!("{}: split '{metric}' has no accuracy", path.display());
    };
    Ok(a)
}

/// Mean, sample standard deviation and count of a recipe's metric over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The split.
    pub metric: String,
    /// Mean accuracy over the seeds.
    pub mean: f64,
    /// Sample standard deviation (n − 1); `None` for one seed.
    pub sd: Option<f64>,
    /// Number of seeds.
    pub n: usize,
}

/// Mean and sample standard deviation of `values` (which must not be empty).
pub fn summarize(metric: &str, values: &[f64]) -> Summary {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n.max(1) as f64;
    let sd = (n > 1).then(|| {
        let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        (ss / (n - 1) as f64).sqrt()
    });
    Summary {
        metric: metric.to_string(),
        mean,
        sd,
        n,
    }
}

/// One row of a table, averaged over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowSummary {
    /// The row key.
    pub key: String,
    /// Mean accuracy over the seeds that have this row.
    pub accuracy: f64,
    /// How many seeds have it.
    pub n: usize,
}

/// One table of the programs' results, averaged over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableSummary {
    /// The table's title.
    pub title: String,
    /// The split it breaks down.
    pub split: Option<String>,
    /// What the row keys are.
    pub key: Option<String>,
    /// Rows in the order they first appear.
    pub rows: Vec<RowSummary>,
}

/// Every table of `results`, rows averaged over the seeds (tables matched by title, rows by key,
/// both in the order they first appear).
pub fn table_means(results: &[RunResult]) -> Vec<TableSummary> {
    let mut tables: Vec<(TableSummary, Vec<f64>)> = Vec::new();
    for r in results {
        for t in &r.tables {
            let i = match tables.iter().position(|(s, _)| s.title == t.title) {
                Some(i) => i,
                None => {
                    tables.push((
                        TableSummary {
                            title: t.title.clone(),
                            split: t.split.clone(),
                            key: t.key.clone(),
                            rows: Vec::new(),
                        },
                        Vec::new(),
                    ));
                    tables.len() - 1
                }
            };
            let (summary, sums) = &mut tables[i];
            for row in &t.rows {
                let Some(a) = row.accuracy.filter(|a| a.is_finite()) else {
                    continue;
                };
                match summary.rows.iter().position(|s| s.key == row.key) {
                    Some(j) => {
                        sums[j] += a;
                        summary.rows[j].n += 1;
                    }
                    None => {
                        summary.rows.push(RowSummary {
                            key: row.key.clone(),
                            accuracy: 0.0,
                            n: 1,
                        });
                        sums.push(a);
                    }
                }
            }
        }
    }
    tables
        .into_iter()
        .map(|(mut s, sums)| {
            for (row, sum) in s.rows.iter_mut().zip(sums) {
                row.accuracy = sum / row.n as f64;
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_mean_and_sample_sd() {
        let s = summarize("test", &[0.8, 0.9, 1.0]);
        assert!((s.mean - 0.9).abs() < 1e-12);
        assert!((s.sd.unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(s.n, 3);
        let s = summarize("test", &[0.75]);
        assert_eq!((s.mean, s.sd, s.n), (0.75, None, 1));
    }

    fn result(json: &str) -> RunResult {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn results_are_read_tolerantly_and_tables_averaged() {
        let a = result(
            r#"{"program": "logic", "encoder": "lstm", "new_field": [1],
                "splits": {"valid": {"accuracy": 0.5}, "test": {"accuracy": 0.6, "total": 10}},
                "tables": [{"title": "by operators", "split": "test", "key": "operators",
                            "rows": [{"key": "1", "accuracy": 1.0}, {"key": 2, "accuracy": 0.5}]}]}"#,
        );
        let b = result(
            r#"{"splits": {"test": {"accuracy": 0.8}},
                "tables": [{"title": "by operators", "key": "operators",
                            "rows": [{"key": "2", "accuracy": 0.7}, {"key": "3", "accuracy": 0.2}]}]}"#,
        );
        let p = Path::new("r/result.json");
        assert_eq!(metric_accuracy(&a, "test", p).unwrap(), 0.6);
        let e = metric_accuracy(&b, "valid", p).unwrap_err().to_string();
        assert!(
            e.contains("r/result.json") && e.contains("'valid'") && e.contains("test"),
            "{e}"
        );
        let t = table_means(&[a, b]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].split.as_deref(), Some("test"));
        assert_eq!(t[0].key.as_deref(), Some("operators"));
        let rows: Vec<(&str, f64, usize)> = t[0]
            .rows
            .iter()
            .map(|r| (r.key.as_str(), r.accuracy, r.n))
            .collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], ("1", 1.0, 1));
        assert_eq!((rows[1].0, rows[1].2), ("2", 2));
        assert!((rows[1].1 - 0.6).abs() < 1e-12);
        assert_eq!(rows[2], ("3", 0.2, 1));
    }
}
