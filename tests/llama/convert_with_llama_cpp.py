"""Runs llama.cpp's own converter (convert_hf_to_gguf.py, from the sources scripts/build_llama_cpp.sh
fetches) on a Hugging Face directory, unchanged but for one thing:

    python convert_with_llama_cpp.py LLAMA_CPP_SRC MODEL_DIR OUT.gguf --pre llama-bpe [--outtype f32]

The converter names a byte-level BPE pre-tokenizer (tokenizer.ggml.pre) by hashing the ids the
tokenizer gives a fixed text, and knows only the hashes of published tokenizers. The tests train
their own small tokenizers with a published model's split regex, so their ids (and hash) differ:
--pre says which published pre-tokenizer the directory's split is, and everything else (the
vocabulary, merges, token types, chat template, tensors and their layout) is the converter's.
"""
import argparse
import os
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("src")
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--pre", required=True)
    parser.add_argument("--outtype", default="f32")
    args = parser.parse_args()

    converter = os.path.join(args.src, "convert_hf_to_gguf.py")
    if not os.path.isfile(converter):
        sys.exit(f"{converter} not found: scripts/setup.sh fetches llama.cpp's sources "
                 "(scripts/build_llama_cpp.sh --source)")
    sys.path.insert(0, args.src)
    sys.path.insert(1, os.path.join(args.src, "gguf-py"))
    from conversion import base  # the converter's package; imported first so the override below holds

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: args.pre
    import convert_hf_to_gguf
    sys.argv = [converter, args.model_dir, "--outfile", args.out, "--outtype", args.outtype]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
