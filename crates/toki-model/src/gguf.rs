//! A GGUF v2/v3 reader: metadata, tensor directory, and dequantization to f32.
//!
//! Only what toki needs to import llama.cpp files: scalar/string/array metadata and the
//! tensor types F32, F16, BF16, Q8_0, Q4_0 and Q4_1. Any other tensor type is an error
//! naming it, never a silent misread.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};

use crate::error::{ModelError, Result};

/// A metadata value as stored in the file.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::I64(v) if *v >= 0 => Some(*v as u64),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(v) => Some(*v),
            Value::U64(v) => Some(*v as f64),
            Value::I64(v) => Some(*v as f64),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// The ggml element types toki knows by name (for error messages) and can decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    BF16,
    /// Known to llama.cpp but not decoded here; the raw id is kept for the error.
    Other(u32),
}

impl GgmlType {
    fn from_id(id: u32) -> Self {
        match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            8 => Self::Q8_0,
            30 => Self::BF16,
            other => Self::Other(other),
        }
    }

    /// (elements per block, bytes per block), or None for types toki does not decode.
    fn block(self) -> Option<(usize, usize)> {
        match self {
            Self::F32 => Some((1, 4)),
            Self::F16 | Self::BF16 => Some((1, 2)),
            Self::Q4_0 => Some((32, 18)),
            Self::Q4_1 => Some((32, 20)),
            Self::Q8_0 => Some((32, 34)),
            Self::Other(_) => None,
        }
    }

    pub fn name(self) -> String {
        const NAMES: [&str; 31] = [
            "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
            "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
            "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
            "BF16",
        ];
        match self {
            Self::Other(id) => NAMES
                .get(id as usize)
                .map(|s| s.to_string())
                .unwrap_or_else(|| format!("#{id}")),
            known => format!("{known:?}"),
        }
    }
}

/// One entry of the tensor directory.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions as GGUF lists them: fastest-varying first (`ne`). The row-major (HF)
    /// shape is this reversed.
    pub ne: Vec<usize>,
    pub kind: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: usize,
}

impl TensorInfo {
    /// Row-major shape, slowest dimension first (what safetensors and Burn use).
    pub fn shape(&self) -> Vec<usize> {
        self.ne.iter().rev().copied().collect()
    }
    pub fn numel(&self) -> usize {
        self.ne.iter().product()
    }
}

/// A GGUF file read into memory.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    bytes: Vec<u8>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("file truncated at byte {} (wanted {n} more)", self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn len(&mut self) -> std::result::Result<usize, String> {
        let n = self.u64()?;
        if n > self.buf.len() as u64 {
            return Err(format!("length {n} at byte {} exceeds the file", self.pos));
        }
        Ok(n as usize)
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        let n = self.len()?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| format!("invalid UTF-8 string at byte {}", self.pos))
    }
    fn value(&mut self, ty: u32, depth: usize) -> std::result::Result<Value, String> {
        let v = match ty {
            0 => Value::U64(self.u8()? as u64),
            1 => Value::I64(self.u8()? as i8 as i64),
            2 => Value::U64(u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as u64),
            3 => Value::I64(i16::from_le_bytes(self.take(2)?.try_into().expect("2")) as i64),
            4 => Value::U64(self.u32()? as u64),
            5 => Value::I64(self.u32()? as i32 as i64),
            6 => Value::F64(f32::from_bits(self.u32()?) as f64),
            7 => Value::Bool(self.u8()? != 0),
            8 => Value::Str(self.string()?),
            9 => {
                if depth > 2 {
                    return Err("arrays nested too deeply".into());
                }
                let inner = self.u32()?;
                let n = self.len()?;
                let mut items = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    items.push(self.value(inner, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(self.u64()? as i64),
            12 => Value::F64(f64::from_bits(self.u64()?)),
            other => return Err(format!("unknown metadata value type {other}")),
        };
        Ok(v)
    }
}

impl GgufFile {
    /// Read and index a GGUF file (v2 or v3).
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| ModelError::io(path, e))?;
        let err = |msg: String| ModelError::Gguf {
            path: path.to_path_buf(),
            msg,
        };
        let mut c = Cursor {
            buf: &bytes,
            pos: 0,
        };
        if c.take(4).map_err(err)? != b"GGUF" {
            return Err(err("not a GGUF file (bad magic)".into()));
        }
        let version = c.u32().map_err(err)?;
        if !(2..=3).contains(&version) {
            return Err(err(format!(
                "GGUF version {version} is not supported (2 or 3)"
            )));
        }
        let n_tensors = c.u64().map_err(err)? as usize;
        let n_kv = c.u64().map_err(err)? as usize;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = c.string().map_err(err)?;
            let ty = c.u32().map_err(err)?;
            let v = c
                .value(ty, 0)
                .map_err(|m| err(format!("metadata `{key}`: {m}")))?;
            metadata.insert(key, v);
        }
        let mut infos = Vec::with_capacity(n_tensors.min(1 << 16));
        for _ in 0..n_tensors {
            let name = c.string().map_err(err)?;
            let n_dims = c.u32().map_err(err)? as usize;
            if n_dims > 4 {
                return Err(err(format!("tensor `{name}` has {n_dims} dimensions")));
            }
            let mut ne = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                ne.push(c.u64().map_err(err)? as usize);
            }
            let kind = GgmlType::from_id(c.u32().map_err(err)?);
            let rel = c.u64().map_err(err)? as usize;
            infos.push((name, ne, kind, rel));
        }
        let align = metadata
            .get("general.alignment")
            .and_then(Value::as_u64)
            .unwrap_or(32) as usize;
        if align == 0 {
            return Err(err("general.alignment is 0".into()));
        }
        let data_start = c.pos.div_ceil(align) * align;
        let mut tensors = Vec::with_capacity(infos.len());
        for (name, ne, kind, rel) in infos {
            let info = TensorInfo {
                name,
                ne,
                kind,
                offset: data_start + rel,
            };
            if let Some((per, size)) = kind.block() {
                let n = info.numel();
                if !n.is_multiple_of(per) {
                    return Err(err(format!(
                        "tensor `{}`: {n} elements is not a whole number of blocks",
                        info.name
                    )));
                }
                let end = info.offset + n / per * size;
                if end > bytes.len() {
                    return Err(err(format!(
                        "tensor `{}` runs past the end of the file (truncated?)",
                        info.name
                    )));
                }
            }
            tensors.push(info);
        }
        Ok(Self {
            path: path.to_path_buf(),
            version,
            metadata,
            tensors,
            bytes,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Dequantize one tensor to f32, in row-major order.
    pub fn dequantize(&self, info: &TensorInfo) -> Result<Vec<f32>> {
        let (per, size) = info
            .kind
            .block()
            .ok_or_else(|| ModelError::UnsupportedGgmlType {
                name: info.name.clone(),
                kind: info.kind.name(),
            })?;
        let n = info.numel();
        let raw = &self.bytes[info.offset..info.offset + n / per * size];
        Ok(dequantize(info.kind, raw, n))
    }
}

/// Decode `n` elements of ggml type `kind` from `raw` (which holds exactly those blocks).
pub fn dequantize(kind: GgmlType, raw: &[u8], n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n);
    let h = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
    match kind {
        GgmlType::F32 => out.extend(
            raw.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
        GgmlType::F16 => out.extend(raw.chunks_exact(2).map(h)),
        GgmlType::BF16 => out.extend(
            raw.chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        ),
        // Q8_0 block: f16 scale d, 32 x i8 q; x = d * q.
        GgmlType::Q8_0 => {
            for blk in raw.chunks_exact(34) {
                let d = h(blk);
                out.extend(blk[2..].iter().map(|&q| d * (q as i8) as f32));
            }
        }
        // Q4_0 block: f16 d, 16 bytes; low nibbles are elements 0..16, high nibbles 16..32;
        // x = d * (nibble - 8).
        GgmlType::Q4_0 => {
            for blk in raw.chunks_exact(18) {
                let d = h(blk);
                let qs = &blk[2..];
                out.extend(qs.iter().map(|&q| d * ((q & 0x0f) as f32 - 8.0)));
                out.extend(qs.iter().map(|&q| d * ((q >> 4) as f32 - 8.0)));
            }
        }
        // Q4_1 block: f16 d, f16 m, 16 bytes; x = d * nibble + m, same nibble order as Q4_0.
        GgmlType::Q4_1 => {
            for blk in raw.chunks_exact(20) {
                let d = h(blk);
                let m = h(&blk[2..]);
                let qs = &blk[4..];
                out.extend(qs.iter().map(|&q| d * (q & 0x0f) as f32 + m));
                out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
            }
        }
        GgmlType::Other(_) => unreachable!("block() rejects unknown types before decoding"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_block_decodes() {
        let mut blk = f16::from_f32(0.5).to_le_bytes().to_vec();
        blk.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let x = dequantize(GgmlType::Q8_0, &blk, 32);
        assert_eq!(x[0], -8.0);
        assert_eq!(x[31], 7.5);
    }

    #[test]
    fn q4_1_nibble_order() {
        let mut blk = f16::from_f32(2.0).to_le_bytes().to_vec();
        blk.extend(f16::from_f32(-1.0).to_le_bytes());
        blk.extend((0..16).map(|i| (i as u8) | (15 - i as u8) << 4));
        let x = dequantize(GgmlType::Q4_1, &blk, 32);
        assert_eq!(x[0], -1.0); // 2*0 - 1
        assert_eq!(x[15], 29.0); // 2*15 - 1
        assert_eq!(x[16], 29.0); // high nibble of byte 0 = 15
        assert_eq!(x[31], -1.0);
    }

    #[test]
    fn q4_0_offsets_by_eight() {
        let mut blk = f16::from_f32(1.0).to_le_bytes().to_vec();
        blk.extend([0x80u8; 16]);
        let x = dequantize(GgmlType::Q4_0, &blk, 32);
        assert!(x[..16].iter().all(|&v| v == -8.0));
        assert!(x[16..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn unknown_type_is_named() {
        assert_eq!(GgmlType::from_id(12).name(), "Q4_K");
        assert_eq!(GgmlType::from_id(99).name(), "#99");
    }
}
