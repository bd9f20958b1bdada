"""Models as people download them: a Llama-3-shaped directory written by transformers, with a
byte-level BPE tokenizer.json (built by `tokenizers`), no tokenizer.model, a list-valued
eos_token_id and a generation_config.json. infer_llama's greedy text equals transformers'
generate, and the Python module's tokenizer reads the directory."""
import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest
import torch

APPS = os.environ.get("COLOSSAL_APPS", "")
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
        "of a wife. However little known the feelings or views of such a man may be on his first entering a "
        "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
        "the rightful property of some one or other of their daughters. Emma Woodhouse, handsome, clever, and rich, "
        "with a comfortable home and happy disposition, seemed to unite some of the best blessings of existence.")


LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("llama3")
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok.train_from_iterator([TEXT] * 20, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                              show_progress=False))
    bos, eot_text, eot = (tok.token_to_id(s) for s in specials)
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[(specials[0], bos)])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=specials[0], eos_token=specials[2])
    hf_tok.chat_template = LLAMA3_TEMPLATE
    hf_tok.save_pretrained(d)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rope_theta=500000.0,
                         bos_token_id=bos, eos_token_id=[eot_text, eot], tie_word_embeddings=False,
                         initializer_range=0.3)  # wide weights: decisive logits, no near-ties for greedy to flip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(d)
    GenerationConfig(bos_token_id=bos, eos_token_id=[eot_text, eot], do_sample=True, temperature=0.6,
                     top_p=0.9).save_pretrained(d)
    assert not (d / "tokenizer.model").exists()
    return d, hf_tok, model


def test_infer_llama_greedy_equals_transformers(llama3_dir):
    d, hf_tok, model = llama3_dir
    prompt = "It is a truth universally acknowledged"
    ids = hf_tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False, temperature=None, top_p=None)
    want = hf_tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    # --temperature 0 over the generation config's sampling; nothing else (no hidden penalty).
    cli = subprocess.run([f"{APPS}/infer_llama", "--model", str(d), "--prompt", prompt, "--temperature", "0",
                          "--max_new_tokens", "24"], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.rstrip("\n") == prompt + want


def test_config_list_eos_and_generation_defaults_are_read(llama3_dir):
    d, _, _ = llama3_dir
    assert isinstance(json.loads((d / "config.json").read_text())["eos_token_id"], list)
    # Without --temperature the generation config's sampling applies (do_sample, 0.6, top_p 0.9):
    # a seeded run is reproducible and differs from the greedy one with some seed.
    run = lambda *extra: subprocess.run([f"{APPS}/infer_llama", "--model", str(d), "--max_new_tokens", "16", *extra],
                                        capture_output=True, text=True, check=True).stdout
    assert run("--seed", "3") == run("--seed", "3")
    greedy = run("--temperature", "0")
    assert any(run("--seed", str(s)) != greedy for s in range(5))


def test_python_tokenizer_reads_tokenizer_json(llama3_dir):
    import colossal

    d, hf_tok, _ = llama3_dir
    tok = colossal.llama.Tokenizer(str(d))
    text = "Emma Woodhouse, handsome, clever, and rich <|eot_id|> 12345 caf\u00e9"
    assert tok.encode(text) == hf_tok(text).input_ids
    assert tok.decode(hf_tok(text).input_ids) == hf_tok.decode(hf_tok(text).input_ids)
    assert tok.eos_id == hf_tok.convert_tokens_to_ids("<|eot_id|>")


def test_train_llama_fine_tunes_the_directory(llama3_dir, tmp_path):
    """--pretrained DIR with only tokenizer.json: it tokenises with it, trains, and writes a model
    directory whose tokenizer files are the ones it was given."""
    d, hf_tok, _ = llama3_dir
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in [
        "It is a truth universally acknowledged, that a single man in possession of a good fortune",
        "Emma Woodhouse, handsome, clever, and rich, with a comfortable home"] * 8))
    out = tmp_path / "out"
    r = subprocess.run([f"{APPS}/train_llama", "--pretrained", str(d), "--dataset", str(data), "--eval_dataset", str(data),
                        "--max_steps", "2", "--batch_size", "2", "--max_length", "32", "--output", str(out),
                        "--sample_tokens", "0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "model" / "tokenizer.json").read_text() == (d / "tokenizer.json").read_text()
    assert not (out / "model" / "tokenizer.model").exists()
    from transformers import AutoTokenizer
    assert AutoTokenizer.from_pretrained(out / "model")("Emma").input_ids == hf_tok("Emma").input_ids


def test_server_chat_goes_through_the_models_template(llama3_dir):
    """/v1/chat/completions renders the conversation with the directory's chat template (as
    transformers' apply_chat_template) and answers with transformers' greedy continuation."""
    d, hf_tok, model = llama3_dir
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Who wrote Emma?"}]
    ids = hf_tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=10, do_sample=False, temperature=None, top_p=None)
    want = hf_tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([f"{APPS}/infer_llama", "--serve", "--model", str(d), "--port", str(port), "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        body = {"messages": messages, "max_tokens": 10, "temperature": 0}
        req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        reply = json.loads(urllib.request.urlopen(req, timeout=60).read())
        assert reply["choices"][0]["message"]["content"] == want
        assert reply["usage"]["prompt_tokens"] == ids.shape[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_sft_learns_only_the_replies_through_the_template(llama3_dir, tmp_path):
    """--mode sft on {"messages": [{"role", "content"}]} with the directory's chat template: the
    tokens are the rendered conversation's, and the loss covers exactly each assistant reply (with
    its end-of-turn token), as transformers' template cuts it."""
    d, hf_tok, _ = llama3_dir
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who wrote Emma?"},
            {"role": "assistant", "content": "Jane Austen."}, {"role": "user", "content": "When?"},
            {"role": "assistant", "content": "In 1815."}]
    data = tmp_path / "sft.jsonl"
    data.write_text((json.dumps({"messages": conv}) + "\n") * 4)
    out = tmp_path / "out"
    r = subprocess.run([f"{APPS}/train_llama", "--pretrained", str(d), "--mode", "sft", "--dataset", str(data),
                        "--max_steps", "1", "--batch_size", "1", "--max_length", "256", "--output", str(out),
                        "--sample_tokens", "0", "--eval_interval", "-1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    import numpy as np
    base = next(p for p in (out / "cache").glob("*.json"))
    tokens = np.fromfile(str(base)[:-5] + ".tokens", dtype=np.int32)
    mask = np.fromfile(str(base)[:-5] + ".mask", dtype=np.uint8)
    one = len(tokens) // 4
    want = hf_tok.apply_chat_template(conv, tokenize=True, return_dict=True)["input_ids"]
    assert tokens[:one].tolist() == list(want)
    learned = hf_tok.decode(tokens[:one][mask[:one] == 1].tolist())
    assert learned == "Jane Austen.<|eot_id|>In 1815.<|eot_id|>"


def test_gguf_of_the_directory_reads_the_byte_level_vocabulary(llama3_dir, tmp_path):
    """The directory as llama.cpp's converter lays out Llama 3 (vocabulary gpt2, pre llama-bpe,
    merges, control tokens, the chat template): the same ids as tokenizer.json and the same greedy
    text as the directory."""
    d, hf_tok, _ = llama3_dir
    import sys
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "llama", "write_gguf.py")
    gguf_path = tmp_path / "model-f32.gguf"
    subprocess.run([sys.executable, source, str(d), str(gguf_path), "f32"], check=True, capture_output=True)
    import colossal
    text = "Emma Woodhouse, handsome <|eot_id|> 1815 caf\u00e9"
    assert colossal.llama.Tokenizer(str(gguf_path)).encode(text) == hf_tok(text).input_ids
    run = lambda model: subprocess.run([f"{APPS}/infer_llama", "--model", str(model), "--prompt", "It is a truth",
                                        "--temperature", "0", "--max_new_tokens", "16"],
                                       capture_output=True, text=True, check=True).stdout
    assert run(gguf_path) == run(d)


def test_gguf_from_llama_cpps_own_converter(llama3_dir, tmp_path):
    """llama.cpp's convert_hf_to_gguf.py (from the sources scripts/setup.sh fetches) on the
    directory: the file it writes gives the directory's ids and greedy text. The converter runs
    unchanged but for naming the pre-tokenizer (tests/llama/convert_with_llama_cpp.py says why)."""
    d, hf_tok, _ = llama3_dir
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.join(here, "..", "..")
    src = subprocess.run(["bash", os.path.join(root, "scripts", "build_llama_cpp.sh"), "--root"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.isfile(os.path.join(src, "convert_hf_to_gguf.py")), \
        f"llama.cpp's sources are missing under {src}: run scripts/setup.sh"
    gguf_path = tmp_path / "converted-f32.gguf"
    done = subprocess.run([sys.executable, os.path.join(here, "..", "llama", "convert_with_llama_cpp.py"), src, str(d),
                           str(gguf_path), "--pre", "llama-bpe"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    import gguf
    reader = gguf.GGUFReader(str(gguf_path))
    field = lambda name: reader.fields[name].contents()
    assert field("tokenizer.ggml.model") == "gpt2" and field("tokenizer.ggml.pre") == "llama-bpe"
    assert "<|start_header_id|>" in field("tokenizer.chat_template")

    import colossal
    texts = [TEXT, "Emma Woodhouse, handsome <|eot_id|> 1815 caf\u00e9", "  \n\n spaces\t\tand 1234567 \u4f60\u597d \U0001F999"]
    tok = colossal.llama.Tokenizer(str(gguf_path))
    for text in texts:
        assert tok.encode(text) == hf_tok(text).input_ids, text
    run = lambda model: subprocess.run([f"{APPS}/infer_llama", "--model", str(model), "--prompt", "It is a truth",
                                        "--temperature", "0", "--max_new_tokens", "16"],
                                       capture_output=True, text=True, check=True).stdout
    assert run(gguf_path) == run(d)


def llama_cpp_source():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    return subprocess.run(["bash", os.path.join(root, "scripts", "build_llama_cpp.sh"), "--root"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_colossal_export_writes_the_byte_level_vocabulary_as_llama_cpps_converter(llama3_dir, tmp_path):
    """`colossal export --gguf` of the directory (tokenizer.json only): every metadata key and
    tensor equal to llama.cpp's converter's file (vocabulary gpt2, pre llama-bpe recognised from the
    split regex, tokens, types, merges, special ids, add_bos, the chat template); the file gives the
    directory's ids and greedy text here, and in llama-completion where llama.cpp is built."""
    import sys

    import gguf
    import numpy as np
    d, hf_tok, _ = llama3_dir
    ours_path = tmp_path / "ours.gguf"
    r = subprocess.run([f"{APPS}/colossal", "export", "--model", str(d), "--gguf", str(ours_path), "--outtype", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    here = os.path.dirname(os.path.abspath(__file__))
    theirs_path = tmp_path / "theirs.gguf"
    done = subprocess.run([sys.executable, os.path.join(here, "..", "llama", "convert_with_llama_cpp.py"),
                           llama_cpp_source(), str(d), str(theirs_path), "--pre", "llama-bpe"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    ours, theirs = gguf.GGUFReader(str(ours_path)), gguf.GGUFReader(str(theirs_path))
    skip = {"general.name", "general.size_label"}
    keys = {k for k in ours.fields if not k.startswith("GGUF.")} - skip
    assert keys == {k for k in theirs.fields if not k.startswith("GGUF.")} - skip
    for k in keys:
        assert ours.fields[k].contents() == theirs.fields[k].contents(), k
    b = {t.name: t for t in theirs.tensors}
    for t in ours.tensors:
        assert np.array_equal(np.asarray(t.data), np.asarray(b[t.name].data)), t.name

    import colossal
    tok = colossal.llama.Tokenizer(str(ours_path))
    for text in [TEXT, "Emma Woodhouse, handsome <|eot_id|> 1815 caf\u00e9", "  \n\n spaces\t\tand 1234567 \u4f60"]:
        assert tok.encode(text) == hf_tok(text).input_ids, text
    run = lambda model: subprocess.run([f"{APPS}/infer_llama", "--model", str(model), "--prompt", "It is a truth",
                                        "--temperature", "0", "--max_new_tokens", "16"],
                                       capture_output=True, text=True, check=True).stdout
    ours_text = run(ours_path)
    assert ours_text == run(d)
    cache = os.environ.get("COLOSSAL_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "colossal-cpp"))
    import glob
    completion = sorted(glob.glob(os.path.join(cache, "llama-cpp-python-*", "build", "bin", "llama-completion")))
    if completion:
        for _ in range(10):  # see test_gguf_export.py: a run is complete once its timings were logged
            c = subprocess.run([completion[-1], "-m", str(ours_path), "-p", "It is a truth", "-n", "16", "--temp", "0",
                                "--top-k", "1", "-t", "1", "--no-warmup", "-no-cnv", "--no-display-prompt"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
            if b"total time" in c.stderr:
                break
        # llama.cpp prints the tokens' raw bytes, we print text (an invalid byte as U+FFFD, as Python decodes).
        theirs_text = c.stdout.decode("utf-8", errors="replace").strip()
        assert theirs_text == ours_text[len("It is a truth"):].strip(), (theirs_text, ours_text)


@pytest.mark.parametrize("pre", ["qwen2", "gpt-2", "starcoder", "tekken", "deepseek-v3"])
def test_colossal_export_names_the_pre_tokenizer_by_its_split(llama3_dir, pre, tmp_path):
    """The directory's tokenizer.json with another model's split: the file names that model's
    pre-tokenizer, and reads back with tokenizers' ids; a split llama.cpp does not know is refused."""
    import shutil

    import gguf
    d = tmp_path / "model"
    shutil.copytree(llama3_dir[0], d)
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    if pre == "gpt-2":  # GPT-2's own form: ByteLevel with its built-in regex
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in PRE_SPLITS[pre]] +
            [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tj = json.loads(tok.to_str())
    tj["model"]["ignore_merges"] = False
    (d / "tokenizer.json").write_text(json.dumps(tj))
    r = subprocess.run([f"{APPS}/colossal", "export", "--model", str(d), "--gguf", str(tmp_path / "m.gguf")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert gguf.GGUFReader(str(tmp_path / "m.gguf")).fields["tokenizer.ggml.pre"].contents() == pre
    import colossal
    from tokenizers import Tokenizer as HfTokenizer
    ref = HfTokenizer.from_str(json.dumps(tj))
    ours = colossal.llama.Tokenizer(str(tmp_path / "m.gguf"))
    for text in [TEXT] + MIXED:
        assert ours.encode(text) == ref.encode(text).ids, (pre, text)
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{L}+|\s+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    (d / "tokenizer.json").write_text(json.dumps(tj))
    r = subprocess.run([f"{APPS}/colossal", "export", "--model", str(d), "--gguf", str(tmp_path / "bad.gguf")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and r"splits by \p{L}+|\s+; llama.cpp names no such split" in r.stdout + r.stderr
    assert not (tmp_path / "bad.gguf").exists()


# The pre-tokenizers of the models whose GGUF files name these tokenizer.ggml.pre values, as their
# tokenizer.json files write them (Split regexes in order, then ByteLevel without its own regex).
_DIGITS = r"\p{N}"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PRE_SPLITS = {
    "llama-bpe": [SPLIT],
    "qwen2": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+"],
    "qwen35": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt-2": [_GPT2],
    "starcoder": [_DIGITS, _GPT2],
    "tekken": [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
               r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt-4o": [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
               r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
               r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "deepseek-v3": [r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"  # as DeepSeek's tokenizer.json reads
                    r"[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|"
                    r"\s*[\r\n]+|\s+(?!\S)|\s+"],
}
MIXED = ["It's 12345 o'clock; THEY'RE here\r\n\n  and   there\tTabs", "CamelCaseWords and HTTPServer x/y//z 3.14159",
         "\u4f60\u597d\u4e16\u754c\u3001\u3072\u3089\u304c\u306a\u30ab\u30bf\u30ab\u30ca 2024\u5e74",
         "na\u00efve e\u0301\u0302 \u0915\u094d\u0937 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 !!! ...?? {\"a\": [1, 2]}",
         "\U0001F469\u200D\U0001F469\u200D\U0001F467 \u00bd \u2460 1,000,000"]


@pytest.mark.parametrize("pre", sorted(PRE_SPLITS))
def test_gguf_pre_tokenizer_names_split_as_the_models_tokenizer_json(pre, tmp_path):
    """A byte-level BPE trained with each model's split, written to GGUF under that model's
    tokenizer.ggml.pre name (vocabulary only): our ids equal tokenizers' on mixed text."""
    import gguf
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(ignore_merges=pre == "llama-bpe"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in PRE_SPLITS[pre]] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator([TEXT] * 10 + MIXED * 5, trainers.BpeTrainer(
        vocab_size=500, special_tokens=["<|end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tj = json.loads(tok.to_str())
    vocab = sorted(tj["model"]["vocab"].items(), key=lambda kv: kv[1])
    path = tmp_path / f"{pre}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t == "<|end|>" else 1 for t, _ in vocab])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    import colossal
    ours = colossal.llama.Tokenizer(str(path))
    for text in [TEXT] + MIXED:
        assert ours.encode(text) == tok.encode(text).ids, (pre, text)
