#!/usr/bin/python3
"""Writes an llmq model folder (Llama architecture, F32 or BF16 safetensors) as an F32 GGUF file
for llama.cpp, so that the CPU benchmark can run llama.cpp on the same weights (bench/cpu_bench.cpp
--llama-dir). BF16 and Q8_0 files are then made from it by llama.cpp's own llama-quantize.

  hf_to_gguf.py MODEL_DIR OUT.gguf --gguf-py LLAMA_CPP/gguf-py

The GGUF carries no vocabulary (tokenizer model "no_vocab", vocab_size dummy tokens): the benchmark
feeds token ids. llama-server detokenizes what it generates, so for it --placeholder-vocab writes
placeholder pieces instead (bench/real_job_vs_llama_server.py). Q and K rows are permuted from Hugging Face's rotary layout to GGML's, as
llama.cpp's convert_hf_to_gguf.py does for Llama (the benchmark measures speed only: the logits are
not compared with llmq's here).
Needs numpy (Debian: python3-numpy) and llama.cpp's gguf-py (pure Python).
"""
import argparse
import json
import struct
import sys
from pathlib import Path


def read_safetensors(path, np):
    """name -> float32 array, for F32 and BF16 tensors."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[base + a:base + b]
        if t["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype=np.float32)
        elif t["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            sys.exit(f"{path}: tensor {name}: dtype {t['dtype']} is not F32 or BF16")
        out[name] = arr.reshape(t["shape"])
    return out


def permute(w, n_head):
    """HF's q/k rows (two rotary halves per head) in GGML's interleaved order."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("--placeholder-vocab", action="store_true",
                    help="write a SentencePiece-type vocabulary of placeholder pieces (<unk> <s> "
                         "</s>, then '\u2581t<id>'), so that llama-server, which detokenizes what "
                         "it generates, runs the model (the benchmark still feeds token ids)")
    args = ap.parse_args()
    sys.path.insert(0, args.gguf_py)
    import numpy as np
    import gguf

    cfg = json.loads((Path(args.model_dir) / "config.json").read_text())
    if cfg.get("model_type", "llama") != "llama":
        sys.exit(f"{args.model_dir}/config.json: model_type {cfg.get('model_type')}: only llama")
    tensors = {}
    for f in sorted(Path(args.model_dir).glob("*.safetensors")):
        tensors.update(read_safetensors(f, np))
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim", H // heads)
    vocab = cfg["vocab_size"]

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(Path(args.model_dir).name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if args.placeholder_vocab:
        w.add_tokenizer_model("llama")
        specials = {0: "<unk>", 1: "<s>", 2: "</s>"}
        w.add_token_list([specials.get(i, f"\u2581t{i}") for i in range(vocab)])
        w.add_token_scores([0.0] * vocab)
        w.add_token_types([gguf.TokenType.CONTROL if i in specials else gguf.TokenType.NORMAL
                           for i in range(vocab)])
        w.add_unk_token_id(0)
        w.add_bos_token_id(cfg.get("bos_token_id", 1))
        w.add_eos_token_id(cfg.get("eos_token_id", 2))
        w.add_add_bos_token(False)  # the prompts are token ids with their BOS
    else:
        w.add_tokenizer_model("no_vocab")

    def put(name, arr):
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    put("token_embd.weight", tensors["model.embed_tokens.weight"])
    put("output_norm.weight", tensors["model.norm.weight"])
    if "lm_head.weight" in tensors and not cfg.get("tie_word_embeddings", False):
        put("output.weight", tensors["lm_head.weight"])
    for i in range(L):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", tensors[p + "input_layernorm.weight"])
        put(f"blk.{i}.ffn_norm.weight", tensors[p + "post_attention_layernorm.weight"])
        put(f"blk.{i}.attn_q.weight", permute(tensors[p + "self_attn.q_proj.weight"], heads))
        put(f"blk.{i}.attn_k.weight", permute(tensors[p + "self_attn.k_proj.weight"], kv_heads))
        put(f"blk.{i}.attn_v.weight", tensors[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", tensors[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_gate.weight", tensors[p + "mlp.gate_proj.weight"])
        put(f"blk.{i}.ffn_up.weight", tensors[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", tensors[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
