"""Build offline stand-ins for the Hub ids TRL's ``tests/test_grpo_trainer.py`` loads.

This machine cannot reach the Hugging Face Hub, so the tiny models (``trl-internal-testing/tiny-*``) and the
``trl-internal-testing/zen`` dataset that TRL's GRPO test module names are built here, locally, and written where
``huggingface_hub`` / ``datasets`` look for them offline:

* models: ``$HF_HOME/hub/models--<org>--<name>/{refs/main,snapshots/<sha>/}`` (the Hub cache layout), so that
  ``from_pretrained("<hub id>")`` resolves with ``HF_HUB_OFFLINE=1``;
* datasets: ``$HF_HOME/datasets/<org>___<name>/<config>/0.0.0/<hash>/`` (the ``datasets`` cache layout that
  ``load_dataset("<hub id>", "<config>")`` falls back to offline, streaming included).

Nothing from TRL is copied into this repository: the script reads, from a TRL source tree extracted by ``run.sh``
(``git archive <ref> scripts``), TRL's own ``scripts/generate_zen_dataset.py`` (run with ``push_to_hub`` captured
instead of uploading), the tiny-model weight initialiser ``scripts/generate_tiny_models/_common.py`` and the
remote-code model sources; the chat templates come from the installed ``trl`` package (``trl/chat_templates``).

What differs from the Hub originals (so some TRL tests fail on stock here, the same way for both runs):

* weights are random (TRL's initialiser, seeded) and the configs follow TRL's generator scripts, but configs that
  TRL reads from the real base model (``AutoConfig.from_pretrained(<base>)``) are approximated from defaults;
* tokenizers are byte-level BPE with *no merges* (every byte is one token; the 256 byte tokens have the GPT-2 /
  Qwen ids) plus the family's special tokens. With ``--small-vocab 0`` the special tokens get their real ids and the
  vocabulary its real size (128k-262k); with ``--small-vocab N`` (``run.sh`` default 1024) they are numbered right
  after the bytes and the vocabulary has N tokens, about 15x less CPU per training test. Either way, tests that
  feed hand-written real Qwen token ids decode to different text (with a small vocabulary: ids out of range);
* not built: the vision-language models and the ``zen-image`` / ``zen-multi-image`` datasets, the full-size
  ``Qwen/Qwen2.5-0.5B-Instruct`` and ``HuggingFaceTB/SmolVLM-Instruct`` (vLLM / accelerator tests).

Usage::

    python benchmarks/trl_suite/build_standins.py --trl-src /tmp/trl-suite/stock --hf-home /tmp/trl-suite/hf-v1024 \
        --small-vocab 1024
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

import torch

ORG = "trl-internal-testing"
SHA = "0" * 40  # the one snapshot "revision" of every stand-in


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-unicode map, in GPT-2's order (so byte tokens get GPT-2 / Qwen ids 0..255)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs], strict=True))


def chat_template(name: str) -> str:
    return resources.files("trl").joinpath("chat_templates", f"{name}.jinja").read_text()


# A plain [INST] template for the Mistral stand-in (TRL ships none for Mistral v0.2).
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}"
)

QWEN25_SPECIALS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|object_ref_start|>": 151646,
    "<|object_ref_end|>": 151647,
    "<|box_start|>": 151648,
    "<|box_end|>": 151649,
    "<|quad_start|>": 151650,
    "<|quad_end|>": 151651,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<|fim_prefix|>": 151659,
    "<|fim_middle|>": 151660,
    "<|fim_suffix|>": 151661,
    "<|fim_pad|>": 151662,
    "<|repo_name|>": 151663,
    "<|file_sep|>": 151664,
}
QWEN3_SPECIALS = {
    **QWEN25_SPECIALS,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}
LLAMA3_SPECIALS = {
    "<|begin_of_text|>": 128000,
    "<|end_of_text|>": 128001,
    "<|start_header_id|>": 128006,
    "<|end_header_id|>": 128007,
    "<|eom_id|>": 128008,
    "<|eot_id|>": 128009,
    "<|python_tag|>": 128010,
}

# Tokenizer families: vocabulary size, special tokens at their ids, the roles of some of them, the chat template.
# Tokens named in the template but not listed get the next free ids after the byte tokens.
TOKENIZERS = {
    "qwen2.5": dict(
        vocab=151665,
        specials=QWEN25_SPECIALS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        template=chat_template("qwen2_5"),
        gen_eos=[151645, 151643],
    ),
    "qwen3": dict(
        vocab=151669,
        specials=QWEN3_SPECIALS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        template=chat_template("qwen3"),
        gen_eos=[151645, 151643],
    ),
    "llama3.2": dict(
        vocab=128256,
        specials=LLAMA3_SPECIALS,
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        template=chat_template("llama3_2"),
        gen_eos=[128001, 128008, 128009],
    ),
    "mistral0.2": dict(
        vocab=32000,
        specials={"<unk>": 0, "<s>": 1, "</s>": 2},
        unk="<unk>",
        bos="<s>",
        eos="</s>",
        template=MISTRAL_TEMPLATE,
        gen_eos=[2],
    ),
    "gemma2": dict(
        vocab=256000,
        specials={"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 106, "<end_of_turn>": 107},
        unk="<unk>",
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        template=chat_template("gemma"),
        gen_eos=[1, 107],
    ),
    "cohere2": dict(
        vocab=262144,
        specials={"<PAD>": 0, "<UNK>": 1, "<BOS_TOKEN>": 2, "<|END_OF_TURN_TOKEN|>": 3},
        unk="<UNK>",
        bos="<BOS_TOKEN>",
        eos="<|END_OF_TURN_TOKEN|>",
        pad="<PAD>",
        template=chat_template("cohere2"),
        gen_eos=[3],
    ),
    "glm4moe": dict(
        vocab=151365,
        specials={
            "<|endoftext|>": 151329,
            "[MASK]": 151330,
            "[gMASK]": 151331,
            "[sMASK]": 151332,
            "<sop>": 151333,
            "<eop>": 151334,
            "<|system|>": 151335,
            "<|user|>": 151336,
            "<|assistant|>": 151337,
            "<|observation|>": 151338,
        },
        eos="<|endoftext|>",
        pad="<|endoftext|>",
        template=chat_template("glm4moe"),
        gen_eos=[151329, 151336, 151338],
    ),
    "gptoss": dict(
        vocab=201088,
        specials={
            "<|startoftext|>": 199998,
            "<|endoftext|>": 199999,
            "<|return|>": 200002,
            "<|constrain|>": 200003,
            "<|channel|>": 200005,
            "<|start|>": 200006,
            "<|end|>": 200007,
            "<|message|>": 200008,
            "<|call|>": 200012,
        },
        bos="<|startoftext|>",
        eos="<|return|>",
        pad="<|endoftext|>",
        template=chat_template("gptoss"),
        gen_eos=[200002, 199999, 200012],
    ),
    "nemotron3": dict(
        vocab=131072,
        specials={"<unk>": 0, "<s>": 1, "</s>": 2, "<|im_start|>": 10, "<|im_end|>": 11},
        unk="<unk>",
        bos="<s>",
        eos="<|im_end|>",
        template=chat_template("nemotron_3_nano"),
        gen_eos=[2, 11],
    ),
}

TEMPLATE_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>|</?(?:think|tool_call|tool_response|tools|arg_key|arg_value)>")


def build_tokenizer(family: str, small_vocab: int = 0):
    """The family's stand-in tokenizer and the map from the real special-token ids to the ids used here.

    ``small_vocab``: 0 keeps the real vocabulary size and special-token ids; N > 0 numbers the special tokens right
    after the 256 byte tokens and pads the vocabulary to N (CPU time: the 150k-262k-way output layer dominates).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    spec = TOKENIZERS[family]
    byte_tokens = list(bytes_to_unicode().values())
    names = list(spec["specials"]) + [
        t for t in dict.fromkeys(TEMPLATE_TOKEN.findall(spec["template"])) if t not in spec["specials"]
    ]
    if small_vocab:
        specials = {token: len(byte_tokens) + i for i, token in enumerate(names)}
        size = max(small_vocab, len(byte_tokens) + len(names))
    else:
        specials = dict(spec["specials"])
        taken = set(specials.values())
        next_id = len(byte_tokens)
        for token in names[len(spec["specials"]) :]:
            while next_id in taken:
                next_id += 1
            specials[token] = next_id
            taken.add(next_id)
        size = spec["vocab"]
    id_map = {real: specials[token] for token, real in spec["specials"].items()}
    vocab = {}
    by_id = {i: t for t, i in specials.items()}
    bytes_iter = iter(byte_tokens)
    for i in range(size):
        if i in by_id:
            vocab[by_id[i]] = i
        else:
            token = next(bytes_iter, None)
            vocab[token if token is not None else f"<|standin_{i}|>"] = i
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    roles = {f"{role}_token": spec[role] for role in ("bos", "eos", "pad", "unk") if role in spec}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=spec["template"], **roles)
    tokenizer.model_max_length = 131072
    return tokenizer, id_map


def load_trl_script(path: Path, name: str, package_dir: Path | None = None):
    """Import one of TRL's helper scripts from the extracted source tree (not copied into this repo)."""
    locations = [str(package_dir)] if package_dir else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=locations)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def snapshot_dir(hf_home: Path, repo_id: str) -> Path:
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(SHA)
    snap = repo / "snapshots" / SHA
    shutil.rmtree(snap, ignore_errors=True)
    snap.mkdir(parents=True)
    return snap


def model_specs():
    """(hub id, tokenizer family, model class name, config class name, config kwargs), after TRL's scripts."""
    small = dict(hidden_size=8, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2)
    small["intermediate_size"] = 32
    score = dict(small, hidden_size=16, num_labels=1)
    return [
        ("tiny-Qwen2ForCausalLM-2.5", "qwen2.5", "Qwen2ForCausalLM", "Qwen2Config", dict(small, vocab_size=151665)),
        (
            "tiny-Qwen2ForSequenceClassification-2.5",
            "qwen2.5",
            "Qwen2ForSequenceClassification",
            "Qwen2Config",
            dict(score, vocab_size=152064, rope_theta=1000000.0, max_position_embeddings=32768),
        ),
        ("tiny-Qwen3ForCausalLM", "qwen3", "Qwen3ForCausalLM", "Qwen3Config", dict(small, vocab_size=151669)),
        (
            "tiny-Qwen3ForSequenceClassification",
            "qwen3",
            "Qwen3ForSequenceClassification",
            "Qwen3Config",
            dict(score, vocab_size=151936, tie_word_embeddings=True),
        ),
        (
            "tiny-Qwen3MoeForCausalLM",
            "qwen3",
            "Qwen3MoeForCausalLM",
            "Qwen3MoeConfig",
            dict(
                small,
                vocab_size=151936,
                num_experts=4,
                num_experts_per_tok=2,
                max_position_embeddings=40960,
                rope_theta=1000000.0,
                norm_topk_prob=True,
                bos_token_id=151643,
                eos_token_id=151645,
                head_dim=128,
                max_window_layers=48,
            ),
        ),
        ("tiny-LlamaForCausalLM-3.2", "llama3.2", "LlamaForCausalLM", "LlamaConfig", dict(small, vocab_size=128256)),
        (
            "tiny-LlamaForSequenceClassification-3.2",
            "llama3.2",
            "LlamaForSequenceClassification",
            "LlamaConfig",
            dict(score, vocab_size=128256, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128009),
        ),
        (
            "tiny-MistralForCausalLM-0.2",
            "mistral0.2",
            "MistralForCausalLM",
            "MistralConfig",
            dict(small, vocab_size=32000),
        ),
        ("tiny-Gemma2ForCausalLM", "gemma2", "Gemma2ForCausalLM", "Gemma2Config", dict(small, vocab_size=256000)),
        (
            "tiny-Cohere2ForCausalLM",
            "cohere2",
            "Cohere2ForCausalLM",
            "Cohere2Config",
            dict(small, vocab_size=262144, logit_scale=1.0, rope_theta=50000, bos_token_id=2, eos_token_id=3),
        ),
        (
            "tiny-Glm4MoeForCausalLM",
            "glm4moe",
            "Glm4MoeForCausalLM",
            "Glm4MoeConfig",
            dict(
                small,
                vocab_size=151365,
                moe_intermediate_size=32,
                head_dim=2,
                n_routed_experts=4,
                num_experts_per_tok=2,
                attention_bias=True,
                eos_token_id=[151329, 151336, 151338],
                pad_token_id=151329,
                rope_theta=1000000,
                routed_scaling_factor=2.5,
                use_qk_norm=True,
                num_nextn_predict_layers=1,
            ),
        ),
        (
            "tiny-GptOssForCausalLM",
            "gptoss",
            "GptOssForCausalLM",
            "GptOssConfig",
            dict(small, vocab_size=201088, num_local_experts=4, num_experts_per_tok=2),
        ),
        (
            "tiny-NemotronHForCausalLM-nano",
            "nemotron3",
            "NemotronHForCausalLM",
            "NemotronHConfig",
            dict(
                vocab_size=131072,
                hidden_size=16,
                num_attention_heads=4,
                num_key_value_heads=2,
                intermediate_size=32,
                layers_block_type=["mamba", "attention", "moe"],
                mamba_num_heads=8,
                mamba_head_dim=4,
                mamba_n_groups=1,
                ssm_state_size=16,
                mamba_d_conv=4,
                mamba_expand=2,
                n_routed_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=32,
                moe_shared_expert_intermediate_size=32,
                use_mamba_kernels=False,
            ),
        ),
    ]


def save_model(hf_home: Path, repo_id: str, model, tokenizer, family: str, id_map: dict[int, int]) -> None:
    from transformers import GenerationConfig

    spec = TOKENIZERS[family]
    snap = snapshot_dir(hf_home, repo_id)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(snap)
    tokenizer.save_pretrained(snap)
    gen = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[id_map.get(i, i) for i in spec["gen_eos"]],
        pad_token_id=tokenizer.pad_token_id,
    )
    gen.save_pretrained(snap)
    (snap / "README.md").write_text(f"Offline stand-in for {repo_id} (random weights), built by build_standins.py.\n")


def remap_ids(kwargs: dict, id_map: dict[int, int], vocab_size: int | None) -> dict:
    """Config kwargs with the special-token ids moved by ``id_map`` (and the vocabulary size, in small-vocab mode)."""
    out = dict(kwargs)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(out.get(key), list):
            out[key] = [id_map.get(i, i) for i in out[key]]
        elif key in out:
            out[key] = id_map.get(out[key], out[key])
    if vocab_size:
        out["vocab_size"] = vocab_size
    return out


def build_models(hf_home: Path, trl_src: Path, only: set[str] | None, small_vocab: int = 0) -> list[str]:
    import transformers

    common = load_trl_script(trl_src / "scripts" / "generate_tiny_models" / "_common.py", "_trl_tiny_common")
    tokenizers: dict[str, object] = {}
    built = []
    for name, family, model_cls, config_cls, kwargs in model_specs():
        repo_id = f"{ORG}/{name}"
        if only and name not in only:
            continue
        if family not in tokenizers:
            tokenizers[family] = build_tokenizer(family, small_vocab)
        tokenizer, id_map = tokenizers[family]
        config = getattr(transformers, config_cls)(
            **remap_ids(kwargs, id_map, len(tokenizer) if small_vocab else None)
        )
        if hasattr(config, "layer_types") and config.layer_types is not None and "num_hidden_layers" in kwargs:
            config.layer_types = config.layer_types[: kwargs["num_hidden_layers"]]
        torch.manual_seed(0)
        model = getattr(transformers, model_cls)(config).to(dtype=torch.bfloat16)
        common.init_weights_tiny_model(model)
        if model_cls == "NemotronHForCausalLM":  # TRL's script keeps these Mamba weights in float32
            for i, block in enumerate(config.layers_block_type):
                if block == "mamba":
                    mixer = model.model.layers[i].mixer
                    mixer.A_log.data = mixer.A_log.data.float()
                    mixer.D.data = mixer.D.data.float()
        save_model(hf_home, repo_id, model, tokenizer, family, id_map)
        built.append(repo_id)
    if not only or "tiny-RemoteForCausalLM" in only:
        llama = tokenizers.get("llama3.2") or build_tokenizer("llama3.2", small_vocab)
        built.append(build_remote(hf_home, trl_src, common, llama, small_vocab))
    return built


def build_remote(hf_home: Path, trl_src: Path, common, llama, small_vocab: int) -> str:
    """tiny-RemoteForCausalLM from TRL's remote-code sources (a Llama subclass saved with its code)."""
    code_dir = trl_src / "scripts" / "generate_tiny_models" / "for_causal_lm" / "_remote_code"
    load_trl_script(code_dir / "__init__.py", "_remote_code", package_dir=code_dir)
    configuration = load_trl_script(code_dir / "configuration_remote.py", "_remote_code.configuration_remote")
    modeling = load_trl_script(code_dir / "modeling_remote.py", "_remote_code.modeling_remote")
    configuration.RemoteConfig.register_for_auto_class()
    modeling.RemoteModel.register_for_auto_class("AutoModel")
    modeling.RemoteForCausalLM.register_for_auto_class("AutoModelForCausalLM")
    modeling.RemoteForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
    tokenizer, id_map = llama
    sizes = dict(hidden_size=8, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2)
    config = configuration.RemoteConfig(
        vocab_size=len(tokenizer) if small_vocab else 128256, intermediate_size=32, **sizes
    )
    config.auto_map = {
        "AutoModel": "modeling_remote.RemoteModel",
        "AutoModelForSequenceClassification": "modeling_remote.RemoteForSequenceClassification",
    }
    torch.manual_seed(0)
    model = modeling.RemoteForCausalLM(config).to(dtype=torch.bfloat16)
    common.init_weights_tiny_model(model)
    repo_id = f"{ORG}/tiny-RemoteForCausalLM"
    save_model(hf_home, repo_id, model, tokenizer, "llama3.2", id_map)
    snap = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / SHA
    for source in ("configuration_remote.py", "modeling_remote.py"):
        if not (snap / source).exists():
            shutil.copy(code_dir / source, snap / source)
    return repo_id


def build_zen(hf_home: Path, trl_src: Path, repo_id: str = f"{ORG}/zen") -> list[str]:
    """Run TRL's scripts/generate_zen_dataset.py with push_to_hub captured; write each config to the datasets cache."""
    from datasets import Dataset, DatasetDict
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.parquet.parquet import Parquet

    captured: dict[str, DatasetDict] = {}

    def capture(self, repo, config_name="default", **_):
        assert repo == repo_id, repo
        captured[config_name] = self

    original = DatasetDict.push_to_hub, Dataset.push_to_hub
    DatasetDict.push_to_hub = capture
    Dataset.push_to_hub = capture
    try:
        script = load_trl_script(trl_src / "scripts" / "generate_zen_dataset.py", "_trl_generate_zen")
        script.main(test_size=0.1, push_to_hub=True, repo_id=repo_id)
    finally:
        DatasetDict.push_to_hub, Dataset.push_to_hub = original

    namespace, name = repo_id.split("/")
    root = hf_home / "datasets" / f"{namespace}___{name}"
    shutil.rmtree(root, ignore_errors=True)
    for config_name, dataset_dict in captured.items():
        with tempfile.TemporaryDirectory() as tmp:
            files = {}
            for split, dataset in dataset_dict.items():
                path = Path(tmp) / f"{split}-00000-of-00001.parquet"
                dataset.to_parquet(path)
                files[split] = [str(path)]
            builder = Parquet(
                cache_dir=str(Path(tmp) / "cache"),
                dataset_name=name,
                config_name=config_name,
                data_files=DataFilesDict.from_local_or_remote(files),
                hash="0" * 16,
            )
            builder.download_and_prepare()
            # The config folder is named after the config alone, as for a dataset loaded from the Hub.
            shutil.copytree(builder.cache_dir, root / config_name / "0.0.0" / ("0" * 16))
    return sorted(captured)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trl-src", type=Path, required=True, help="TRL source tree with scripts/ (git archive)")
    parser.add_argument("--hf-home", type=Path, required=True, help="HF_HOME to write (hub/ and datasets/)")
    parser.add_argument("--only", nargs="*", help="build only these tiny model names (default: all)")
    parser.add_argument(
        "--small-vocab",
        type=int,
        default=0,
        metavar="N",
        help="vocabulary of N tokens, special tokens right after the bytes (default 0: the real sizes and ids)",
    )
    args = parser.parse_args()
    args.hf_home.mkdir(parents=True, exist_ok=True)
    models = build_models(args.hf_home, args.trl_src, set(args.only) if args.only else None, args.small_vocab)
    configs = build_zen(args.hf_home, args.trl_src) if not args.only else []
    summary = {"models": models, "zen_configs": configs, "hf_home": str(args.hf_home), "small_vocab": args.small_vocab}
    (args.hf_home / "standins.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
