// bench_tokenizer: tokenizer.json encoding throughput, ours (text/) beside Hugging Face
// `tokenizers` (Rust, through its Python package) on the same file and the same texts, in one run.
//
//   build/apps/bench_tokenizer                       # a 32k byte-level BPE (Llama 3's split) trained here
//   build/apps/bench_tokenizer --tokenizer DIR --threads 2
//
// Corpora: Jane Austen's novels (one line per paragraph line, ~4 MB) and a multilingual file
// (sentences in 12 scripts, shuffled, ~2 MB). Ours: one thread, then --threads threads over the
// lines. Theirs: encode_batch with RAYON_NUM_THREADS=1 and =--threads. Every id is compared.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "llama/corpus.h"
#include "text/hf_tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> austen_lines() {
  std::vector<std::string> out;
  for (const auto& novel : colossal::llama::read_r_character_vectors(colossal::llama::default_austen_rdb()))
    for (const auto& line : novel)
      if (!line.empty()) out.push_back(line);
  return out;
}

std::vector<std::string> multilingual_lines(size_t count) {
  const std::vector<std::string> sentences = {
      "The quick brown fox jumps over the lazy dog while the children watch from the garden.",
      "Le renard brun rapide saute par-dessus le chien paresseux pendant que les enfants regardent.",
      "Der schnelle braune Fuchs springt über den faulen Hund, während die Kinder zuschauen.",
      "El rápido zorro marrón salta sobre el perro perezoso mientras los niños miran desde el jardín.",
      "Быстрая коричневая лиса прыгает через ленивую собаку, пока дети смотрят из сада.",
      "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο ενώ τα παιδιά κοιτάζουν.",
      "敏捷的棕色狐狸跳过了懒狗，孩子们在花园里看着。",
      "素早い茶色の狐が怠惰な犬を飛び越え、子供たちは庭から見ている。",
      "날쌘 갈색 여우가 게으른 개를 뛰어넘는 동안 아이들은 정원에서 지켜본다.",
      "الثعلب البني السريع يقفز فوق الكلب الكسول بينما يشاهد الأطفال من الحديقة.",
      "השועל החום המהיר קופץ מעל הכלב העצלן בזמן שהילדים צופים מהגן.",
      "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है जबकि बच्चे बगीचे से देखते हैं।",
      "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ ขณะที่เด็กๆ มองจากสวน 2024 😀👍🏽",
  };
  std::mt19937 rng(7);
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    std::string line;
    for (int k = 0; k < 3; ++k) line += (k ? " " : "") + sentences[rng() % sentences.size()];
    line += " " + std::to_string(rng() % 100000);
    out.push_back(std::move(line));
  }
  return out;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream f(path, std::ios::binary);
  for (const auto& l : lines) f << l << "\n";
}

size_t bytes_of(const std::vector<std::string>& lines) {
  size_t n = 0;
  for (const auto& l : lines) n += l.size();
  return n;
}

// Encodes every line (in [begin, end)) into ids[line].
void encode_range(const colossal::text::HfTokenizer& tok, const std::vector<std::string>& lines, size_t begin, size_t end,
                  std::vector<std::vector<int64_t>>& ids) {
  for (size_t i = begin; i < end; ++i) ids[i] = tok.encode(lines[i], false);
}

double ours(const colossal::text::HfTokenizer& tok, const std::vector<std::string>& lines, int threads,
            std::vector<std::vector<int64_t>>& ids) {
  ids.assign(lines.size(), {});
  const auto t0 = Clock::now();
  if (threads <= 1) {
    encode_range(tok, lines, 0, lines.size(), ids);
  } else {
    std::vector<std::thread> pool;
    const size_t per = (lines.size() + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
    for (int t = 0; t < threads; ++t) {
      const size_t b = std::min(lines.size(), per * static_cast<size_t>(t)), e = std::min(lines.size(), b + per);
      pool.emplace_back([&, b, e] { encode_range(tok, lines, b, e, ids); });
    }
    for (auto& th : pool) th.join();
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokenizer.json encoding: ours beside Hugging Face tokenizers, same file, same texts"};
  std::string tokenizer, python = COLOSSAL_DEFAULT_PYTHON, work = "/tmp/bench_tokenizer";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t vocab = 32000;
  int repeats = 3;
  app.add_option("--tokenizer", tokenizer, "a directory with tokenizer.json (default: train one here)");
  app.add_option("--threads", threads, "threads for the parallel runs")->capture_default_str();
  app.add_option("--vocab_size", vocab, "vocabulary of the tokenizer trained here")->capture_default_str();
  app.add_option("--repeats", repeats, "timed passes (the best is kept)")->capture_default_str();
  app.add_option("--python", python, "the python with `tokenizers`")->capture_default_str();
  app.add_option("--work_dir", work, "where the corpora and the trained tokenizer go")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::filesystem::create_directories(work);
  const auto austen = austen_lines();
  const auto multi = multilingual_lines(20000);
  write_lines(work + "/austen.txt", austen);
  write_lines(work + "/multilingual.txt", multi);
  if (tokenizer.empty()) {
    tokenizer = work + "/llama3_like";
    const std::string script = work + "/train.py";
    std::ofstream(script) << "import sys\n"
        "from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers\n"
        "SPLIT = r\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+\"\n"
        "tok = Tokenizer(models.BPE(ignore_merges=True))\n"
        "tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(SPLIT), behavior='isolated'),"
        " pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])\n"
        "tok.decoder = decoders.ByteLevel()\n"
        "tok.train(sys.argv[1:3], trainers.BpeTrainer(vocab_size=int(sys.argv[4]), special_tokens=['<|begin_of_text|>'],"
        " initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))\n"
        "import os; os.makedirs(sys.argv[3], exist_ok=True); tok.save(sys.argv[3] + '/tokenizer.json')\n";
    const std::string cmd = python + " " + script + " " + work + "/austen.txt " + work + "/multilingual.txt " + tokenizer +
                            " " + std::to_string(vocab);
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "bench_tokenizer: training the tokenizer failed: %s\n", cmd.c_str());
      return 1;
    }
  }
  auto tok = colossal::text::HfTokenizer::from_directory(tokenizer);

  // Theirs: the same files through tokenizers, single-threaded and with --threads.
  const std::string peer = work + "/peer.py";
  std::ofstream(peer) << "import json, os, sys, time\n"
      "os.environ['RAYON_NUM_THREADS'] = sys.argv[3]\n"
      "from tokenizers import Tokenizer\n"
      "tok = Tokenizer.from_file(sys.argv[1] + '/tokenizer.json')\n"
      "lines = [l for l in open(sys.argv[2], encoding='utf-8').read().split('\\n') if l]\n"
      "# The faster of encode_batch and encode_batch_fast (no offsets), whichever this version has.\n"
      "calls = [tok.encode_batch] + ([tok.encode_batch_fast] if hasattr(tok, 'encode_batch_fast') else [])\n"
      "best, how = 1e9, ''\n"
      "for call in calls:\n"
      "    for _ in range(int(sys.argv[4])):\n"
      "        t0 = time.perf_counter(); enc = call(lines, add_special_tokens=False); t = time.perf_counter() - t0\n"
      "        if t < best: best, how = t, call.__name__\n"
      "print(json.dumps({'seconds': best, 'how': how, 'tokens': sum(len(e.ids) for e in enc), 'checksum': sum(i * (k % 7 + 1) for e in enc for k, i in enumerate(e.ids))}))\n";
  auto theirs = [&](const std::string& file, int n) {
    const std::string cmd = python + " " + peer + " " + tokenizer + " " + file + " " + std::to_string(n) + " " + std::to_string(repeats);
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    if (!p || pclose(p) != 0) throw std::runtime_error("bench_tokenizer: the tokenizers run failed: " + cmd);
    return nlohmann::json::parse(out);
  };

  std::printf("tokenizer %s (%ld tokens), %d threads for the parallel runs, best of %d\n", tokenizer.c_str(), tok->vocab_size(),
              threads, repeats);
  std::printf("| corpus | MB | tokens | ours 1 thread MB/s | tokenizers 1 thread MB/s | ratio | ours %d MB/s | tokenizers %d MB/s | ratio | ids equal |\n",
              threads, threads);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& [name, lines] : {std::pair<std::string, const std::vector<std::string>*>{"austen", &austen},
                                   {"multilingual", &multi}}) {
    const double mb = static_cast<double>(bytes_of(*lines)) / 1e6;
    std::vector<std::vector<int64_t>> ids;
    double one = 1e9, many = 1e9;
    for (int r = 0; r < repeats; ++r) one = std::min(one, ours(*tok, *lines, 1, ids));
    for (int r = 0; r < repeats; ++r) many = std::min(many, ours(*tok, *lines, threads, ids));
    int64_t tokens = 0, checksum = 0;
    for (const auto& v : ids)
      for (size_t k = 0; k < v.size(); ++k) tokens += 1, checksum += v[k] * static_cast<int64_t>(k % 7 + 1);
    const auto t1 = theirs(work + "/" + name + ".txt", 1), tn = theirs(work + "/" + name + ".txt", threads);
    const bool same = t1["tokens"].get<int64_t>() == tokens && t1["checksum"].get<int64_t>() == checksum;
    std::printf("| %s | %.2f | %ld | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx | %s |\n", name.c_str(), mb, tokens, mb / one,
                mb / t1["seconds"].get<double>(), t1["seconds"].get<double>() / one, mb / many, mb / tn["seconds"].get<double>(),
                tn["seconds"].get<double>() / many, same ? "yes" : "NO");
    std::printf("{\"corpus\": \"%s\", \"mb\": %.3f, \"tokens\": %ld, \"ours_1\": %.4f, \"theirs_1\": %.4f, \"ours_n\": %.4f, "
                "\"theirs_n\": %.4f, \"threads\": %d, \"theirs_call\": \"%s\", \"ids_equal\": %s}\n",
                name.c_str(), mb, tokens, one, t1["seconds"].get<double>(), many, tn["seconds"].get<double>(), threads,
                t1["how"].get<std::string>().c_str(), same ? "true" : "false");
  }
  return 0;
}
