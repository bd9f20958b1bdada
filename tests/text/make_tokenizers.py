"""Builds tokenizers with Hugging Face `tokenizers` for tests/text/hf_tokenizer_test.cpp.

usage: make_tokenizers.py DIR     (DIR holds corpus.txt and torture.txt, one text per line)

For each kind (a directory under DIR) it trains a small tokenizer on corpus.txt, saves
tokenizer.json (and tokenizer_config.json where the kind tests it), and writes expected.jsonl:
for every line of corpus.txt and torture.txt, the ids with and without special tokens, the
decoded text (with and without skipping special tokens) and whether decode(encode(x)) == x.
"""
import json
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB = 1200


def byte_level_bpe(corpus):  # Llama 3 / Qwen: a split regex, then bytes as characters
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([corpus], trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    tok.add_special_tokens(["<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"])
    tok.add_tokens([AddedToken("[DAY]", single_word=True, lstrip=True, rstrip=True, normalized=False)])
    return tok, None


def sentencepiece_bpe(corpus):  # Llama 2 / Mistral as transformers converts them: bytes as fallback
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB + 259, special_tokens=specials, show_progress=False)
    tok.train([corpus], trainer)
    # Encoding as the converted files do it: the normalizer marks spaces, no pre-tokenizer.
    tok.pre_tokenizer = None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.add_special_tokens([AddedToken("[INST]", normalized=False), AddedToken("[/INST]", normalized=False)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "add_eos_token": True}
    return tok, config


def wordpiece(corpus):  # BERT
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=30))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        show_progress=False)
    tok.train([corpus], trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tok.decoder = decoders.WordPiece()
    tok.add_tokens([AddedToken("yesterday morning", normalized=True)])
    return tok, None


def unigram(corpus):  # T5 / XLM-R shaped
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.UnigramTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train([corpus], trainer)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok.add_special_tokens(["<extra_id_0>"])
    return tok, None


def sentencepiece_unigram(corpus):  # T5 / XLM-R / ALBERT as converted from a .model: Precompiled
    """A SentencePiece Unigram model trained with nmt_nfkc rules, converted by transformers'
    SpmConverter: the normalizer is SentencePiece's compiled charsmap (Precompiled)."""
    import tempfile
    import sentencepiece as spm
    from transformers.convert_slow_tokenizer import SpmConverter

    prefix = os.path.join(tempfile.mkdtemp(), "spm")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=VOCAB, model_type="unigram",
                                   normalization_rule_name="nmt_nfkc", character_coverage=1.0, minloglevel=2,
                                   num_threads=1)

    class Slow:  # the little of a slow tokenizer that SpmConverter reads
        vocab_file = prefix + ".model"
        legacy = True
        add_prefix_space = True

    class Converter(SpmConverter):
        def post_processor(self):
            return processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])

    tok = Converter(Slow()).converted()
    assert tok.to_str().count('"Precompiled"') == 1
    tok.normalizer = normalizers.Sequence([normalizers.Nmt(), tok.normalizer])  # Marian's cleaning first
    return tok, None


def gpt2_bpe(corpus):  # GPT-2: ByteLevel's own regex, a leading space added
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([corpus], trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    return tok, None


def byte_level_normalized_bpe(corpus):  # bytes mapped by the normalizer, split before each mapped space
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.ByteLevel()
    tok.pre_tokenizer = pre_tokenizers.Split("\u0120", behavior="merged_with_next")
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([corpus], trainer)
    return tok, None


def word_level(corpus):  # one id per word (character-level and classic word models), CTC's decoder
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train([corpus], trainers.WordLevelTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<pad>"],
                                                  show_progress=False))
    tok.decoder = decoders.CTC(pad_token="<pad>", word_delimiter_token="|", cleanup=True)
    return tok, None


def subword_bpe(corpus):  # classic BPE: word pieces with "##" and "</w>", lowercased, accents stripped
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents(),
                                           normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.Punctuation()])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["[UNK]"], continuing_subword_prefix="##",
                                  end_of_word_suffix="</w>", show_progress=False)
    tok.train([corpus], trainer)
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    return tok, None


KINDS = {"byte_level_bpe": byte_level_bpe, "sentencepiece_bpe": sentencepiece_bpe, "wordpiece": wordpiece,
         "unigram": unigram, "sentencepiece_unigram": sentencepiece_unigram, "gpt2_bpe": gpt2_bpe,
         "byte_level_normalized_bpe": byte_level_normalized_bpe, "word_level": word_level, "subword_bpe": subword_bpe}


def main(root):
    corpus = os.path.join(root, "corpus.txt")
    lines = []
    for name in ("corpus.txt", "torture.txt"):
        with open(os.path.join(root, name), encoding="utf-8", newline="") as f:
            lines += [l for l in f.read().split("\n") if l]
    for kind, build in KINDS.items():
        out = os.path.join(root, kind)
        os.makedirs(out, exist_ok=True)
        tok, config = build(corpus)
        tok.save(os.path.join(out, "tokenizer.json"))
        if config is not None:
            with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
            # What transformers makes of the directory (which, in 5.x, drops add_bos/add_eos_token).
            from transformers import AutoTokenizer
            hf = AutoTokenizer.from_pretrained(out)
            encode = lambda text, special: hf.encode(text, add_special_tokens=special)
        else:
            encode = lambda text, special: tok.encode(text, add_special_tokens=special).ids
        with open(os.path.join(out, "expected.jsonl"), "w", encoding="utf-8") as f:
            for line in lines:
                ids = encode(line, True)
                plain = encode(line, False)
                f.write(json.dumps({"text": line, "ids": ids, "plain": plain,
                                    "decoded": tok.decode(ids, skip_special_tokens=False),
                                    "decoded_skip": tok.decode(ids, skip_special_tokens=True)}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
