//! The payloads of tensor models (`model_input = Tensor`, `model_type = TensorBased`): the
//! request body the frontend sends ([`TensorRequest`], Dynamo's `NvCreateTensorRequest`), the
//! `data` of every response item ([`TensorResponse`], `NvCreateTensorResponse`) and the
//! card's `tensor_model_config` ([`TensorModelConfig`]).
//!
//! Shapes as observed from Dynamo 1.6.1 (a Python echo worker behind the real frontend):
//!
//! ```text
//! {"id": null | "<request id>", "model": "echo",
//!  "tensors": [{"metadata": {"name": "INPUT0", "data_type": "Int32", "shape": [3],
//!                            "parameters": {"p": {"string": "x"}}},       // only when set
//!               "data": {"data_type": "Int32", "values": [1, 2, 3]}}],
//!  "parameters": {"p1": {"int64": 5}, "p3": {"bool": true}},            // only when set
//!  "outputs": [{"name": "OUTPUT0", "parameters": {...}}]}               // only when asked
//! ```
//!
//! * `data_type` names: `Bool`, `Uint8` … `Uint64`, `Int8` … `Int64`, `Float16`, `BFloat16`,
//!   `Float32`, `Float64`, `Bytes`; the data is tagged with it again (`data.data_type`).
//! * `Bytes` elements are arrays of byte values (`[[120], [121, 122]]`); a worker may also
//!   answer with msgpack `bin` elements, which are read too.
//! * `Float16` / `BFloat16` values travel as their 16-bit patterns (`1.5` is `15872`).
//! * Parameter values are externally tagged: `bool`, `int64`, `uint64`, `double`, `string`.
//! * `triton_model_config` in the card is the serialized Triton `ModelConfig` protobuf as an
//!   array of byte values.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Float16,
    BFloat16,
    Float32,
    Float64,
    Bytes,
}

impl DataType {
    /// Every type, in the order above.
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Float16,
        DataType::BFloat16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bytes,
    ];

    /// Bytes per element in the raw (little-endian) layout; 0 for `Bytes` (length-prefixed).
    pub const fn size(self) -> usize {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Float16 | DataType::BFloat16 => 2,
            DataType::Uint32 | DataType::Int32 | DataType::Float32 => 4,
            DataType::Uint64 | DataType::Int64 | DataType::Float64 => 8,
            DataType::Bytes => 0,
        }
    }
}

/// One element of a `Bytes` tensor. Written as an array of byte values (as Dynamo writes
/// it); read from such an array or from a msgpack `bin`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByteString(pub Vec<u8>);

impl Serialize for ByteString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for ByteString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ByteString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of byte values or a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ByteString, E> {
                Ok(ByteString(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<ByteString, E> {
                Ok(ByteString(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ByteString, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(ByteString(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// The flattened values of a tensor, tagged with their type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "data_type", content = "values")]
pub enum TensorData {
    Bool(Vec<bool>),
    Uint8(Vec<u8>),
    Uint16(Vec<u16>),
    Uint32(Vec<u32>),
    Uint64(Vec<u64>),
    Int8(Vec<i8>),
    Int16(Vec<i16>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    /// IEEE half-precision bit patterns.
    Float16(Vec<u16>),
    /// bfloat16 bit patterns.
    BFloat16(Vec<u16>),
    Float32(Vec<f32>),
    Float64(Vec<f64>),
    Bytes(Vec<ByteString>),
}

impl TensorData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::Bool(v) => v.len(),
            TensorData::Uint8(v) => v.len(),
            TensorData::Uint16(v) | TensorData::Float16(v) | TensorData::BFloat16(v) => v.len(),
            TensorData::Uint32(v) => v.len(),
            TensorData::Uint64(v) => v.len(),
            TensorData::Int8(v) => v.len(),
            TensorData::Int16(v) => v.len(),
            TensorData::Int32(v) => v.len(),
            TensorData::Int64(v) => v.len(),
            TensorData::Float32(v) => v.len(),
            TensorData::Float64(v) => v.len(),
            TensorData::Bytes(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type the values are tagged with.
    pub fn data_type(&self) -> DataType {
        match self {
            TensorData::Bool(_) => DataType::Bool,
            TensorData::Uint8(_) => DataType::Uint8,
            TensorData::Uint16(_) => DataType::Uint16,
            TensorData::Uint32(_) => DataType::Uint32,
            TensorData::Uint64(_) => DataType::Uint64,
            TensorData::Int8(_) => DataType::Int8,
            TensorData::Int16(_) => DataType::Int16,
            TensorData::Int32(_) => DataType::Int32,
            TensorData::Int64(_) => DataType::Int64,
            TensorData::Float16(_) => DataType::Float16,
            TensorData::BFloat16(_) => DataType::BFloat16,
            TensorData::Float32(_) => DataType::Float32,
            TensorData::Float64(_) => DataType::Float64,
            TensorData::Bytes(_) => DataType::Bytes,
        }
    }
}

/// A request, response or tensor parameter value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamValue {
    Bool(bool),
    Int64(i64),
    String(String),
    Double(f64),
    Uint64(u64),
}

/// Parameters by name (sorted, so what is sent does not depend on a hash order).
pub type Params = BTreeMap<String, ParamValue>;

/// Name, type and shape of a tensor (`-1` in a model's declared shape: any size).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorMetadata {
    pub name: String,
    pub data_type: DataType,
    pub shape: Vec<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Params,
}

/// A tensor with its values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    pub metadata: TensorMetadata,
    pub data: TensorData,
}

impl Tensor {
    /// Why the tensor is inconsistent: its data tagged with another type than its metadata,
    /// a negative dimension, or a shape whose element count is not the data's.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.metadata.name;
        if self.data.data_type() != self.metadata.data_type {
            return Err(format!(
                "tensor '{name}': data is {:?} but the metadata says {:?}",
                self.data.data_type(),
                self.metadata.data_type
            ));
        }
        let expected = element_count(&self.metadata.shape).map_err(|e| format!("tensor '{name}': {e}"))?;
        if expected != self.data.len() {
            return Err(format!(
                "tensor '{name}': shape {:?} implies {expected} elements but data has {}",
                self.metadata.shape,
                self.data.len()
            ));
        }
        Ok(())
    }
}

/// The element count a shape implies; negative dimensions and overflow are errors.
pub fn element_count(shape: &[i64]) -> Result<usize, String> {
    shape.iter().try_fold(1usize, |acc, &d| {
        let d = usize::try_from(d).map_err(|_| format!("shape {shape:?} has a negative dimension"))?;
        acc.checked_mul(d).ok_or_else(|| format!("shape {shape:?} has too many elements"))
    })
}

/// An output the client asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestedOutput {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Params,
}

/// The request body of a tensor model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorRequest {
    /// The client's request id; `null` when it gave none.
    pub id: Option<String>,
    pub model: String,
    pub tensors: Vec<Tensor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Params,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<RequestedOutput>,
}

/// One response of a tensor model (the `data` of a stream item).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorResponse {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub tensors: Vec<Tensor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: Params,
}

/// The card's `tensor_model_config`: the model's declared inputs and outputs, and optionally
/// a serialized Triton `ModelConfig` that supersedes them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorModelConfig {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub inputs: Vec<TensorMetadata>,
    #[serde(default)]
    pub outputs: Vec<TensorMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton_model_config: Option<ByteString>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::Codec;

    fn int_tensor(name: &str, shape: Vec<i64>, v: Vec<i32>) -> Tensor {
        Tensor {
            metadata: TensorMetadata {
                name: name.into(),
                data_type: DataType::Int32,
                shape,
                parameters: Params::new(),
            },
            data: TensorData::Int32(v),
        }
    }

    #[test]
    fn request_json_is_dynamos_shape() {
        let mut parameters = Params::new();
        parameters.insert("p1".into(), ParamValue::Int64(5));
        let r = TensorRequest {
            id: None,
            model: "echo".into(),
            tensors: vec![
                int_tensor("INPUT0", vec![3], vec![1, 2, 3]),
                Tensor {
                    metadata: TensorMetadata {
                        name: "INPUT1".into(),
                        data_type: DataType::Bytes,
                        shape: vec![2],
                        parameters: Params::new(),
                    },
                    data: TensorData::Bytes(vec![ByteString(b"x".to_vec()), ByteString(b"yz".to_vec())]),
                },
            ],
            parameters,
            outputs: Vec::new(),
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id": null, "model": "echo", "tensors": [
                {"metadata": {"name": "INPUT0", "data_type": "Int32", "shape": [3]},
                 "data": {"data_type": "Int32", "values": [1, 2, 3]}},
                {"metadata": {"name": "INPUT1", "data_type": "Bytes", "shape": [2]},
                 "data": {"data_type": "Bytes", "values": [[120], [121, 122]]}}],
             "parameters": {"p1": {"int64": 5}}})
        );
    }

    #[test]
    fn msgpack_round_trip_and_bin_elements() {
        let r = TensorResponse {
            id: Some("a".into()),
            model: "m".into(),
            tensors: vec![int_tensor("O", vec![2], vec![-1, 7])],
            parameters: Params::new(),
        };
        let bytes = Codec::Msgpack.encode(&r).unwrap();
        assert_eq!(Codec::Msgpack.decode::<TensorResponse>(&bytes).unwrap(), r);
        // A Python worker may send BYTES elements as msgpack `bin` and floats as float64.
        let v = rmp_serde::to_vec_named(&serde_json::json!({"data_type": "Float32", "values": [1.5f64]})).unwrap();
        assert_eq!(Codec::Msgpack.decode::<TensorData>(&v).unwrap(), TensorData::Float32(vec![1.5]));
        #[derive(Serialize)]
        struct BinData<'a> {
            data_type: &'a str,
            values: Vec<serde_bytes_like::Bin<'a>>,
        }
        mod serde_bytes_like {
            pub struct Bin<'a>(pub &'a [u8]);
            impl serde::Serialize for Bin<'_> {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_bytes(self.0)
                }
            }
        }
        let v = rmp_serde::to_vec_named(&BinData { data_type: "Bytes", values: vec![serde_bytes_like::Bin(b"hi")] })
            .unwrap();
        assert_eq!(
            Codec::Msgpack.decode::<TensorData>(&v).unwrap(),
            TensorData::Bytes(vec![ByteString(b"hi".to_vec())])
        );
    }

    #[test]
    fn tensor_checks() {
        assert!(int_tensor("a", vec![3], vec![1, 2, 3]).check().is_ok());
        assert!(int_tensor("a", vec![2], vec![1]).check().unwrap_err().contains("implies 2 elements"));
        assert!(int_tensor("a", vec![-1], vec![1]).check().unwrap_err().contains("negative"));
        let mut t = int_tensor("a", vec![1], vec![1]);
        t.metadata.data_type = DataType::Float32;
        assert!(t.check().unwrap_err().contains("metadata says Float32"));
        assert!(element_count(&[i64::MAX, i64::MAX]).is_err());
        assert_eq!(element_count(&[]).unwrap(), 1);
    }

    #[test]
    fn model_config_from_a_card() {
        let v = serde_json::json!({"name": "", "inputs": [], "outputs": [], "triton_model_config": [10, 1, 120]});
        let c: TensorModelConfig = serde_json::from_value(v).unwrap();
        assert_eq!(c.triton_model_config.unwrap().0, vec![10, 1, 120]);
    }
}
