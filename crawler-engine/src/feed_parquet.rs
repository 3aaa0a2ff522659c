//! Items as Parquet files, through the `parquet` crate's low-level column writer (no
//! arrow).
//!
//! The schema is the first item's fields, in the order the item serialises them (a
//! struct's declaration order), every column `OPTIONAL` so that `None` (or a missing
//! field) is a null: strings are `BYTE_ARRAY` annotated `STRING`, integers `INT64`, floats
//! `DOUBLE`, booleans `BOOLEAN`; nested lists and maps are written as JSON text in a
//! `STRING` column. A column whose first values are all null takes the type of its first
//! non-null value, and is a `STRING` column if the first row group holds none.
//!
//! A Parquet file's schema is fixed in its footer, so an item that does not fit it (a field
//! the schema lacks, or a value of another type than its column's) is an error naming the
//! field and the item's number, and the feed stops there: the file being written is
//! abandoned, never completed with rows that do not match. An integer in a `DOUBLE`
//! column is taken as a float.
//!
//! Rows are buffered and written a row group at a time (`feed_parquet_row_group_items`
//! items, 10,000 by default), so memory holds one row group's items, not the file's. Files
//! are compressed with Snappy.

use std::sync::Arc;

use parquet::basic::{Compression, LogicalType, Repetition, Type as PhysicalType};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::Value;

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Only nulls so far.
    Unknown,
    Str,
    Int,
    Float,
    Bool,
    /// Nested lists and maps, as JSON text.
    Json,
}

impl Kind {
    fn of(v: &Value) -> Self {
        match v {
            Value::Null => Self::Unknown,
            Value::Bool(_) => Self::Bool,
            Value::Number(n) if n.is_f64() => Self::Float,
            Value::Number(_) => Self::Int,
            Value::String(_) => Self::Str,
            Value::Array(_) | Value::Object(_) => Self::Json,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Unknown => "null",
            Self::Str => "a string",
            Self::Int => "an integer",
            Self::Float => "a float",
            Self::Bool => "a boolean",
            Self::Json => "a list or map",
        }
    }
}

/// One cell of a buffered row.
enum Cell {
    Null,
    Str(Vec<u8>),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// An item's fields in the order it serialises them (serde_json's own map sorts its keys).
struct Fields(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    out.push((k, v));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A Parquet feed's state: its schema (one for every batch), the rows of the row group
/// being filled and the open file's writer.
pub(crate) struct ParquetFeed {
    /// Column names and types, from the first item.
    columns: Vec<(String, Kind)>,
    /// Items seen, for error messages (from 1).
    items: u64,
    /// Buffered rows, each one cell per column.
    rows: Vec<Vec<Cell>>,
    /// The open file (batch), once its first row group is written.
    file: Option<SerializedFileWriter<Vec<u8>>>,
    /// Rows per row group (`feed_parquet_row_group_items`, at least 1).
    group_items: usize,
}

fn pq_error(e: parquet::errors::ParquetError) -> String {
    format!("the Parquet writer failed: {e}")
}

impl ParquetFeed {
    /// A feed writing row groups of `group_items` rows (at least 1).
    pub(crate) fn new(group_items: u64) -> Self {
        Self {
            columns: Vec::new(),
            items: 0,
            rows: Vec::new(),
            file: None,
            group_items: usize::try_from(group_items).unwrap_or(usize::MAX).max(1),
        }
    }

    /// Check `item` against the schema (set from it when it is the first) and buffer it as
    /// a row. An item that does not fit is an error naming the field and the item's number.
    pub(crate) fn push<I: serde::Serialize>(&mut self, item: &I) -> Result<(), String> {
        let json = serde_json::to_vec(item).map_err(|e| e.to_string())?;
        let Fields(fields) = serde_json::from_slice(&json)
            .map_err(|_| "a Parquet feed's item must serialise as a map of fields".to_owned())?;
        let number = self.items + 1;
        if self.items == 0 {
            self.columns = fields
                .iter()
                .map(|(k, _)| (k.clone(), Kind::Unknown))
                .collect();
        }
        let mut row: Vec<Cell> = (0..self.columns.len()).map(|_| Cell::Null).collect();
        // Column types the item fixes, applied only once the whole item fits.
        let mut fixed = Vec::new();
        for (name, value) in fields {
            let Some(i) = self.columns.iter().position(|(n, _)| *n == name) else {
                return Err(format!(
                    "item {number} has the field '{name}', which the feed's first item did not \
                     have: a Parquet file has one schema (the first item's fields)"
                ));
            };
            let kind = Kind::of(&value);
            let column = self.columns[i].1;
            let target = if column == Kind::Unknown {
                if kind != Kind::Unknown {
                    fixed.push((i, kind));
                }
                kind
            } else {
                column
            };
            row[i] = match (target, value) {
                (_, Value::Null) => Cell::Null,
                (Kind::Str, Value::String(s)) => Cell::Str(s.into_bytes()),
                (Kind::Bool, Value::Bool(b)) => Cell::Bool(b),
                (Kind::Int, Value::Number(n)) if n.as_i64().is_some() => {
                    Cell::Int(n.as_i64().unwrap_or_default())
                }
                (Kind::Float, Value::Number(n)) if n.as_f64().is_some() => {
                    Cell::Float(n.as_f64().unwrap_or_default())
                }
                (Kind::Json, v @ (Value::Array(_) | Value::Object(_))) => {
                    Cell::Str(v.to_string().into_bytes())
                }
                (Kind::Int, Value::Number(n)) if n.as_u64().is_some() => {
                    return Err(format!(
                        "item {number}'s field '{name}' is {n}, over a Parquet INT64's maximum"
                    ));
                }
                _ => {
                    return Err(format!(
                        "item {number}'s field '{name}' is {}, but its column holds {} (from \
                         the items before it): a Parquet column has one type",
                        kind.name(),
                        target.name()
                    ));
                }
            };
        }
        for (i, kind) in fixed {
            self.columns[i].1 = kind;
        }
        self.items = number;
        self.rows.push(row);
        Ok(())
    }

    /// Whether a row group is full and should be written.
    pub(crate) fn group_full(&self) -> bool {
        self.rows.len() >= self.group_items
    }

    /// Write the buffered rows as a row group of the open file (opening it first) and
    /// return the file's bytes made since the last call.
    pub(crate) fn write_group(&mut self) -> Result<Vec<u8>, String> {
        if self.file.is_none() {
            self.file = Some(self.open_file()?);
        }
        let rows = std::mem::take(&mut self.rows);
        let Some(file) = self.file.as_mut() else {
            return Ok(Vec::new());
        };
        if !rows.is_empty() {
            let mut group = file.next_row_group().map_err(pq_error)?;
            let mut i = 0;
            while let Some(mut col) = group.next_column().map_err(pq_error)? {
                let defs: Vec<i16> = rows
                    .iter()
                    .map(|r| i16::from(!matches!(r[i], Cell::Null)))
                    .collect();
                let written = match self.columns[i].1 {
                    Kind::Int => {
                        let v: Vec<i64> = rows
                            .iter()
                            .filter_map(|r| match r[i] {
                                Cell::Int(x) => Some(x),
                                _ => None,
                            })
                            .collect();
                        col.typed::<Int64Type>().write_batch(&v, Some(&defs), None)
                    }
                    Kind::Float => {
                        let v: Vec<f64> = rows
                            .iter()
                            .filter_map(|r| match r[i] {
                                Cell::Float(x) => Some(x),
                                _ => None,
                            })
                            .collect();
                        col.typed::<DoubleType>().write_batch(&v, Some(&defs), None)
                    }
                    Kind::Bool => {
                        let v: Vec<bool> = rows
                            .iter()
                            .filter_map(|r| match r[i] {
                                Cell::Bool(x) => Some(x),
                                _ => None,
                            })
                            .collect();
                        col.typed::<BoolType>().write_batch(&v, Some(&defs), None)
                    }
                    Kind::Str | Kind::Json | Kind::Unknown => {
                        let v: Vec<ByteArray> = rows
                            .iter()
                            .filter_map(|r| match &r[i] {
                                Cell::Str(x) => Some(ByteArray::from(x.clone())),
                                _ => None,
                            })
                            .collect();
                        col.typed::<ByteArrayType>()
                            .write_batch(&v, Some(&defs), None)
                    }
                };
                written.map_err(pq_error)?;
                col.close().map_err(pq_error)?;
                i += 1;
            }
            group.close().map_err(pq_error)?;
        }
        file.flush()
            .map_err(|e| format!("the Parquet writer failed: {e}"))?;
        Ok(std::mem::take(file.inner_mut()))
    }

    /// Write what is buffered and the footer, and return the rest of the file's bytes; the
    /// next batch opens a new file.
    pub(crate) fn finish_file(&mut self) -> Result<Vec<u8>, String> {
        let mut out = self.write_group()?;
        if let Some(file) = self.file.take() {
            out.extend(file.into_inner().map_err(pq_error)?);
        }
        Ok(out)
    }

    /// Drop the open file's rows and state (the batch is abandoned).
    pub(crate) fn abandon(&mut self) {
        self.rows.clear();
        self.file = None;
    }

    /// A file writer on the schema; columns still without a type are strings.
    fn open_file(&mut self) -> Result<SerializedFileWriter<Vec<u8>>, String> {
        let mut fields = Vec::with_capacity(self.columns.len());
        for (name, kind) in &mut self.columns {
            if *kind == Kind::Unknown {
                *kind = Kind::Str;
            }
            let (physical, logical) = match kind {
                Kind::Int => (PhysicalType::INT64, None),
                Kind::Float => (PhysicalType::DOUBLE, None),
                Kind::Bool => (PhysicalType::BOOLEAN, None),
                _ => (PhysicalType::BYTE_ARRAY, Some(LogicalType::String)),
            };
            let field = Type::primitive_type_builder(name, physical)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(logical)
                .build()
                .map_err(pq_error)?;
            fields.push(Arc::new(field));
        }
        let schema = Type::group_type_builder("item")
            .with_fields(fields)
            .build()
            .map_err(pq_error)?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        SerializedFileWriter::new(Vec::new(), Arc::new(schema), Arc::new(props)).map_err(pq_error)
    }
}
