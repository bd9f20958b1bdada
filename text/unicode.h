#pragma once
// The few Unicode facts a tokenizer needs, on UTF-8 text: code points in and out, normalisation
// forms and case (utf8proc), and the character classes Hugging Face tokenizers test (whitespace,
// punctuation, control, CJK, combining marks) as its Rust implementation defines them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace colossal::text {

/// The code point starting at s[i] and its length in bytes. Invalid UTF-8 reads as one byte
/// (U+FFFD, length 1), so every input is walked to its end.
std::pair<char32_t, int> decode_utf8(std::string_view s, size_t i);
void append_utf8(std::string& out, char32_t c);
std::vector<char32_t> code_points(std::string_view s);
/// Byte lengths of each character, in order.
std::vector<int> char_lengths(std::string_view s);
bool valid_utf8(std::string_view s);
/// Byte lengths of the extended grapheme clusters (UAX #29, utf8proc's tables), in order.
std::vector<size_t> grapheme_lengths(std::string_view s);
/// Invalid sequences replaced by U+FFFD (as Rust's String::from_utf8_lossy).
std::string to_valid_utf8(std::string_view s);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize(std::string_view s, NormalForm form);
/// Per character, as Rust's char::to_lowercase (the full mapping: İ becomes i + U+0307).
std::string lowercase(std::string_view s);

bool is_whitespace(char32_t c);        // the White_Space property
bool is_control(char32_t c);           // BERT: category C*, except \t \n \r
bool is_punctuation(char32_t c);       // category P*
bool is_bert_punctuation(char32_t c);  // ASCII symbols and category P*
bool is_chinese_char(char32_t c);      // the CJK ideograph blocks BERT pads with spaces
bool is_combining_mark(char32_t c);    // category M*
bool is_numeric(char32_t c);           // category N*
bool is_alphanumeric(char32_t c);      // categories L* and N*

}  // namespace colossal::text
