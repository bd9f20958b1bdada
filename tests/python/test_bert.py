"""BERT as transformers builds it: random-weight BertForMaskedLM and BertForSequenceClassification
directories saved by transformers load here with their logits (a padded batch of sentence pairs,
token types included, fp32), the directories we save load back in transformers with the same
logits, a bare BertModel gets a new classifier, unsupported fields are refused by name, and
train_bert fine-tunes under DDP, ZeRO-2, Gemini and tensor parallelism exactly as one process
(colossal verify: losses, gradients and parameters)."""
import json
import os
import re
import subprocess

import pytest
import torch

from conftest import APPS

TEXTS = ["It is a truth universally acknowledged, that a single man in possession of a good fortune, must be "
         "in want of a wife.", "Emma Woodhouse, handsome, clever, and rich, with a comfortable home.",
         "No one who had ever seen Catherine Morland in her infancy would have supposed her born to be an heroine.",
         "Sir Walter Elliot, of Kellynch Hall, in Somersetshire, was a man who never took up any book but one."]
SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
             max_position_embeddings=128, type_vocab_size=2, initializer_range=0.3)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A WordPiece tokenizer trained by `tokenizers` on the texts, saved as BertTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(TEXTS * 5, trainers.WordPieceTrainer(
        vocab_size=200, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]")


def build(kind, tokenizer, d, **extra):
    import transformers as tf

    config = tf.BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, num_labels=3,
                           **{**SHAPE, **extra})
    torch.manual_seed(0)
    model = getattr(tf, kind)(config).eval()
    with torch.no_grad():  # biases and norms away from their initial values, so each one matters
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
            elif "LayerNorm" in name:
                p.normal_(1, 0.3)
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return model


def pair_batch(tokenizer):
    enc = tokenizer(TEXTS[:2], TEXTS[2:], return_tensors="pt", padding=True)
    assert enc.attention_mask.sum() < enc.attention_mask.numel() and enc.token_type_ids.max() == 1
    return enc.input_ids, enc.attention_mask, enc.token_type_ids


CASES = [("BertForMaskedLM", "BertForMaskedLM", {}),
         ("BertForSequenceClassification", "BertForSequenceClassification", {}),
         ("BertForSequenceClassification", "BertForSequenceClassification", {"hidden_act": "gelu_new"})]


@pytest.mark.parametrize("kind, ours, extra", CASES)
def test_logits_equal_transformers_and_our_directory_loads_back(kind, ours, extra, tokenizer, tmp_path):
    import colossal
    import transformers as tf

    theirs = build(kind, tokenizer, tmp_path / "theirs", **extra)
    model = getattr(colossal.bert, ours).from_pretrained(tmp_path / "theirs")
    assert model.new_layers == ""
    model.eval()
    ids, mask, types = pair_batch(tokenizer)
    with torch.no_grad():
        want = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        got = model(ids, attention_mask=mask, token_type_ids=types)
    assert got.shape == want.shape
    keep = mask.bool() if want.dim() == 3 else torch.ones(want.shape[0], dtype=torch.bool)
    diff = (want[keep] - got[keep]).abs().max().item()
    assert diff < 1e-4, f"{kind}: max logit difference {diff}"
    # Token types matter: the same ids with all-zero types give other logits.
    with torch.no_grad():
        other = model(ids, attention_mask=mask)
    assert (other[keep] - got[keep]).abs().max().item() > 1e-3

    model.save_pretrained(tmp_path / "ours")
    back = getattr(tf, kind).from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    assert (again[keep] - want[keep]).abs().max().item() < 1e-4


def test_a_bare_encoder_gets_a_new_classifier_and_keeps_its_weights(tokenizer, tmp_path):
    """BertModel (no "bert." prefix, a pooler, no head) as a classifier: the encoder's weights are
    the checkpoint's, the classifier is named as new; as a masked LM, the missing head is named."""
    import colossal
    import transformers as tf

    build("BertModel", tokenizer, tmp_path / "bare")
    base = tf.BertModel.from_pretrained(tmp_path / "bare").eval()
    model = colossal.bert.BertForSequenceClassification.from_pretrained(tmp_path / "bare", num_labels=4)
    assert "classifier.weight" in model.new_layers and "pooler" not in model.new_layers
    params = dict(model.named_parameters())
    assert torch.equal(params["bert.pooler.dense.weight"], base.pooler.dense.weight)
    assert torch.equal(params["bert.encoder.layer.1.output.LayerNorm.bias"], base.encoder.layer[1].output.LayerNorm.bias)
    assert len(model.config["id2label"]) == 4
    mlm = colossal.bert.BertForMaskedLM.from_pretrained(tmp_path / "bare")
    assert "cls.predictions.transform.dense.weight" in mlm.new_layers


@pytest.mark.parametrize("change, message", [
    ({"position_embedding_type": "relative_key"}, "bert: position_embedding_type is \"relative_key\""),
    ({"is_decoder": True}, "bert: is_decoder true is not supported"),
    ({"add_cross_attention": True}, "bert: add_cross_attention true is not supported"),
    ({"problem_type": "regression"}, "bert: problem_type is \"regression\""),
    ({"hidden_act": "swish"}, "hidden_act is \"swish\""),
    ({"model_type": "roberta"}, "model_type \"roberta\" is not bert"),
])
def test_unsupported_fields_are_named(change, message, tokenizer):
    import colossal
    import transformers as tf

    config = json.loads(tf.BertConfig(vocab_size=100, **SHAPE).to_json_string())
    config.update(change)
    with pytest.raises(Exception) as e:
        colossal.bert.BertForSequenceClassification.from_config(config)
    assert message in str(e.value)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory, tokenizer):
    """A transformers classifier directory and JSON lines of texts labelled by the novel they quote.
    Weights at BERT's own initializer range: at 0.3 the attention saturates, and a layout's fp32
    summation order (~1e-7) grows to ~1e-4 in a query gradient by the third Adam step, on some CPUs
    past colossal verify's gradient tolerance (seen on CI)."""
    d = tmp_path_factory.mktemp("bert_finetune")
    build("BertForSequenceClassification", tokenizer, d / "model", initializer_range=0.02)
    with open(d / "data.jsonl", "w") as f:
        for i in range(48):
            k = i % 4
            f.write(json.dumps({"text": " ".join(TEXTS[k].split()[i % 5:i % 5 + 12]), "label": ["pp", "emma", "na", "p"][k]}) + "\n")
    return d


@pytest.mark.parametrize("task, layout", [("classify", ["--plugin", "ddp"]), ("classify", ["--plugin", "zero2"]),
                                          ("classify", ["--plugin", "gemini"]),
                                          ("classify", ["--plugin", "hybrid", "--tp", "2"]),
                                          ("mlm", ["--plugin", "gemini"]), ("mlm", ["--plugin", "hybrid", "--tp", "2"])])
def test_fine_tuning_on_two_ranks_follows_one_process(task, layout, labelled, tmp_path):
    """colossal verify: the layout's first steps (loss, every gradient, every parameter after the
    step) against one process on every replica's texts. Masked LM: the loss is the mean over all
    replicas' masked tokens (as one process takes it), the tied decoder gathered under Gemini."""
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "3", "--", f"{APPS}/train_bert",
           "--task", task, "--pretrained", str(labelled / "model"), "--data", str(labelled / "data.jsonl"),
           "--batch_size", "4", "--dropout", "0", "--lr", "1e-3", "--save_dir", str(tmp_path / "run"), *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out
    assert "gradients and 0 parameters" not in out, out


def test_train_bert_fine_tunes_saves_and_predicts(labelled, tmp_path):
    """Two epochs on two ranks: the held-out accuracy is reported, the saved directory opens in
    transformers as a classifier with the data's label names, and --predict names a label."""
    import transformers as tf

    from conftest import colossal_run
    save = tmp_path / "run"
    _, out = colossal_run(2, f"{APPS}/train_bert", "--pretrained", labelled / "model", "--data",
                          labelled / "data.jsonl", "--batch_size", "4", "--epochs", "2", "--lr", "1e-3",
                          "--held_out_every", "5", "--save_dir", save)
    assert re.search(r"result: held-out classification accuracy [0-9.]+% \(loss [0-9.]+\) on 9 texts", out), out
    back = tf.BertForSequenceClassification.from_pretrained(save / "model")
    assert sorted(back.config.id2label.values()) == ["emma", "na", "p", "pp"]
    p = subprocess.run([f"{APPS}/train_bert", "--save_dir", str(save), "--predict", TEXTS[1]], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\t")[0] in {"emma", "na", "p", "pp"}, p.stdout


def test_the_default_run_reaches_its_stated_accuracy(tmp_path):
    """train_bert with no task flags on 2 ranks: the tiny BERT learns from scratch which of Austen's
    six novels a 64-word passage comes from. docs/bert.md states 85.15% held-out after the default
    4 epochs and 84.35% after 3 (chance: 16.7%, the largest novel's share: 21.9%); the test runs
    the first 3 (CI's time) and allows 80% for other CPUs' rounding."""
    from conftest import colossal_run
    _, out = colossal_run(2, f"{APPS}/train_bert", "--save_dir", tmp_path / "run", "--epochs", "3", timeout=900)
    m = re.search(r"result: held-out classification accuracy ([0-9.]+)% \(loss [0-9.]+\) on 1118 texts", out)
    assert m, out
    assert float(m.group(1)) >= 80.0, out
