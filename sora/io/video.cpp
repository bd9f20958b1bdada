#include "sora/io/video.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/common/check.h"

namespace colossal::sora {
namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

void quiet_ffmpeg() {
  static const bool once = [] {
    av_log_set_level(AV_LOG_FATAL);  // failures reach the user through our errors, which name the file
    return true;
  }();
  (void)once;
}

struct FormatCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecFreer {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFreer {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFreer {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct ScaleFreer {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using Format = std::unique_ptr<AVFormatContext, FormatCloser>;
using Codec = std::unique_ptr<AVCodecContext, CodecFreer>;
using Frame = std::unique_ptr<AVFrame, FrameFreer>;
using Packet = std::unique_ptr<AVPacket, PacketFreer>;
using Scaler = std::unique_ptr<SwsContext, ScaleFreer>;

// An opened input with its best video stream and a decoder for it.
struct Input {
  Format format;
  Codec codec;
  int stream = -1;
  VideoInfo info;
};

Input open_input(const std::string& path) {
  quiet_ffmpeg();
  Input in;
  AVFormatContext* raw = nullptr;
  int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  COLOSSAL_CHECK(rc >= 0, "[video] cannot open '", path, "': ", av_error(rc));
  in.format.reset(raw);
  rc = avformat_find_stream_info(raw, nullptr);
  COLOSSAL_CHECK(rc >= 0, "[video] '", path, "': cannot read its stream information: ", av_error(rc));
  const AVCodec* decoder = nullptr;
  in.stream = av_find_best_stream(raw, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  COLOSSAL_CHECK(in.stream >= 0 && decoder, "[video] '", path, "' has no video stream FFmpeg can decode");
  const AVStream* s = raw->streams[in.stream];
  in.codec.reset(avcodec_alloc_context3(decoder));
  COLOSSAL_CHECK(in.codec && avcodec_parameters_to_context(in.codec.get(), s->codecpar) >= 0,
                 "[video] '", path, "': cannot set up the ", decoder->name, " decoder");
  rc = avcodec_open2(in.codec.get(), decoder, nullptr);
  COLOSSAL_CHECK(rc >= 0, "[video] '", path, "': cannot open the ", decoder->name, " decoder: ", av_error(rc));
  auto& i = in.info;
  i.width = s->codecpar->width;
  i.height = s->codecpar->height;
  const AVRational rate = s->avg_frame_rate.num > 0 ? s->avg_frame_rate : s->r_frame_rate;
  i.fps = rate.den > 0 ? av_q2d(rate) : 0;
  if (s->duration != AV_NOPTS_VALUE) i.duration_s = s->duration * av_q2d(s->time_base);
  else if (raw->duration != AV_NOPTS_VALUE) i.duration_s = static_cast<double>(raw->duration) / AV_TIME_BASE;
  i.frames = s->nb_frames > 0 ? s->nb_frames : static_cast<int64_t>(std::llround(i.duration_s * i.fps));
  i.codec = decoder->name;
  return in;
}

// The size a frame is scaled to before the centre crop: the shorter side to the target.
std::pair<int, int> scaled_size(int w, int h, int64_t target_w, int64_t target_h) {
  if (target_w == 0) return {w, h};
  const double s = std::max(static_cast<double>(target_w) / w, static_cast<double>(target_h) / h);
  return {std::max<int>(static_cast<int>(target_w), static_cast<int>(std::lround(w * s))),
          std::max<int>(static_cast<int>(target_h), static_cast<int>(std::lround(h * s)))};
}

}  // namespace

void DecodeOptions::validate() const {
  COLOSSAL_CHECK(start_frame >= 0 && (num_frames == -1 || num_frames >= 1) && stride >= 1,
                 "[video] start_frame ", start_frame, ", num_frames ", num_frames, ", stride ", stride,
                 ": expected >= 0, >= 1 (or -1: all), >= 1");
  COLOSSAL_CHECK((height == 0) == (width == 0) && height >= 0 && width >= 0, "[video] size ", height, "x", width,
                 ": give both (or neither)");
}

void EncodeOptions::validate() const {
  COLOSSAL_CHECK(fps > 0 && fps <= 240, "[video] fps ", fps, ": expected in (0, 240]");
  COLOSSAL_CHECK(crf >= 0 && crf <= 51, "[video] crf ", crf, ": expected 0..51");
}

VideoInfo probe_video(const std::string& path) { return open_input(path).info; }

torch::Tensor read_video(const std::string& path, const DecodeOptions& o, VideoInfo* info_out) {
  o.validate();
  Input in = open_input(path);
  if (info_out) *info_out = in.info;
  const int64_t out_w = o.width ? o.width : in.info.width, out_h = o.height ? o.height : in.info.height;
  const int64_t last = o.num_frames < 0 ? -1 : o.start_frame + (o.num_frames - 1) * o.stride;  // inclusive
  std::vector<torch::Tensor> frames;
  Packet packet(av_packet_alloc());
  Frame frame(av_frame_alloc());
  Scaler scaler;
  int64_t index = 0;  // decoded frames so far
  int decode_errors = 0;
  std::string first_error;
  bool done = false;
  auto take = [&] {  // every frame the decoder has ready
    while (!done) {
      const int rc = avcodec_receive_frame(in.codec.get(), frame.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      if (rc < 0) {
        ++decode_errors;
        if (first_error.empty()) first_error = av_error(rc);
        return;
      }
      const int64_t i = index++;
      if (i >= o.start_frame && (i - o.start_frame) % o.stride == 0 && (last < 0 || i <= last)) {
        const auto [sw, sh] = scaled_size(frame->width, frame->height, o.width, o.height);
        scaler.reset(sws_getCachedContext(scaler.release(), frame->width, frame->height,
                                          static_cast<AVPixelFormat>(frame->format), sw, sh, AV_PIX_FMT_RGB24,
                                          SWS_BICUBIC, nullptr, nullptr, nullptr));
        COLOSSAL_CHECK(scaler, "[video] '", path, "': cannot convert its pixel format to RGB");
        auto rgb = torch::empty({sh, sw, 3}, torch::kUInt8);
        uint8_t* dst[4] = {rgb.data_ptr<uint8_t>(), nullptr, nullptr, nullptr};
        int dst_stride[4] = {static_cast<int>(sw * 3), 0, 0, 0};
        sws_scale(scaler.get(), frame->data, frame->linesize, 0, frame->height, dst, dst_stride);
        frames.push_back(rgb.narrow(0, (sh - out_h) / 2, out_h).narrow(1, (sw - out_w) / 2, out_w).contiguous());
      }
      av_frame_unref(frame.get());
      if (last >= 0 && i >= last) done = true;
    }
  };
  while (!done) {
    const int rc = av_read_frame(in.format.get(), packet.get());
    if (rc == AVERROR_EOF) break;
    if (rc < 0) {  // a broken container: what was read so far is kept, the shortfall named below
      if (first_error.empty()) first_error = av_error(rc);
      ++decode_errors;
      break;
    }
    if (packet->stream_index == in.stream) {
      const int sent = avcodec_send_packet(in.codec.get(), packet.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) {
        ++decode_errors;
        if (first_error.empty()) first_error = av_error(sent);
      }
      take();
    }
    av_packet_unref(packet.get());
  }
  if (!done) {  // drain the decoder
    avcodec_send_packet(in.codec.get(), nullptr);
    take();
  }
  const std::string errors =
      decode_errors ? c10::str(" (", decode_errors, " decoding error(s), the first: ", first_error, ")") : "";
  if (last >= 0) {
    COLOSSAL_CHECK(done, "[video] '", path, "': frames ", o.start_frame, "..", last, " (stride ", o.stride,
                   ") asked, but only ", index, " could be decoded", errors);
  } else {
    COLOSSAL_CHECK(in.info.frames == 0 || index >= in.info.frames, "[video] '", path,
                   "' is truncated or corrupt: ", index, " of the ", in.info.frames,
                   " frames its header lists could be decoded", errors);
  }
  COLOSSAL_CHECK(!frames.empty(), "[video] '", path, "': no frame from ", o.start_frame, " on (", index,
                 " frames decoded)", errors);
  return torch::stack(frames);
}

void write_video(const std::string& path, const torch::Tensor& frames, const EncodeOptions& o) {
  o.validate();
  quiet_ffmpeg();
  COLOSSAL_CHECK(frames.dim() == 4 && frames.size(3) == 3 && frames.scalar_type() == torch::kUInt8 &&
                     frames.size(0) >= 1,
                 "[video] write '", path, "': expected uint8 frames [T, H, W, 3], got ", frames.sizes(), " ",
                 frames.scalar_type());
  const int h = static_cast<int>(frames.size(1)), w = static_cast<int>(frames.size(2));
  COLOSSAL_CHECK(h % 2 == 0 && w % 2 == 0 && h >= 2 && w >= 2, "[video] write '", path, "': ", h, "x", w,
                 " frames; H.264 in yuv420p needs an even height and width");
  const auto rgb = frames.contiguous();
  const std::string tmp = path + ".partial.mp4";
  AVFormatContext* raw = nullptr;
  int rc = avformat_alloc_output_context2(&raw, nullptr, "mp4", tmp.c_str());
  COLOSSAL_CHECK(rc >= 0 && raw, "[video] write '", path, "': ", av_error(rc));
  struct OutputCloser {
    void operator()(AVFormatContext* c) const {
      if (c->pb) avio_closep(&c->pb);
      avformat_free_context(c);
    }
  };
  std::unique_ptr<AVFormatContext, OutputCloser> out(raw);
  const AVCodec* encoder = avcodec_find_encoder_by_name("libx264");
  if (!encoder) encoder = avcodec_find_encoder(AV_CODEC_ID_H264);
  COLOSSAL_CHECK(encoder, "[video] write '", path, "': this FFmpeg has no H.264 encoder");
  AVStream* stream = avformat_new_stream(raw, nullptr);
  Codec ctx(avcodec_alloc_context3(encoder));
  COLOSSAL_CHECK(stream && ctx, "[video] write '", path, "': out of memory");
  const AVRational rate = av_d2q(o.fps, 100000);
  ctx->width = w;
  ctx->height = h;
  ctx->pix_fmt = AV_PIX_FMT_YUV420P;
  ctx->framerate = rate;
  ctx->time_base = av_inv_q(rate);
  if (raw->oformat->flags & AVFMT_GLOBALHEADER) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  av_opt_set(ctx->priv_data, "crf", std::to_string(o.crf).c_str(), 0);
  av_opt_set(ctx->priv_data, "preset", o.preset.c_str(), 0);
  rc = avcodec_open2(ctx.get(), encoder, nullptr);
  COLOSSAL_CHECK(rc >= 0, "[video] write '", path, "': cannot open the ", encoder->name, " encoder: ", av_error(rc));
  avcodec_parameters_from_context(stream->codecpar, ctx.get());
  stream->time_base = ctx->time_base;
  stream->avg_frame_rate = rate;
  rc = avio_open(&raw->pb, tmp.c_str(), AVIO_FLAG_WRITE);
  COLOSSAL_CHECK(rc >= 0, "[video] cannot write '", tmp, "': ", av_error(rc));
  rc = avformat_write_header(raw, nullptr);
  COLOSSAL_CHECK(rc >= 0, "[video] write '", path, "': ", av_error(rc));

  Frame yuv(av_frame_alloc());
  yuv->format = AV_PIX_FMT_YUV420P;
  yuv->width = w;
  yuv->height = h;
  COLOSSAL_CHECK(av_frame_get_buffer(yuv.get(), 0) >= 0, "[video] write '", path, "': out of memory");
  Scaler scaler(sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_YUV420P, SWS_BICUBIC, nullptr, nullptr,
                               nullptr));
  Packet packet(av_packet_alloc());
  auto drain = [&] {
    while (true) {
      const int r = avcodec_receive_packet(ctx.get(), packet.get());
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
      COLOSSAL_CHECK(r >= 0, "[video] write '", path, "': encoding failed: ", av_error(r));
      av_packet_rescale_ts(packet.get(), ctx->time_base, stream->time_base);
      packet->stream_index = stream->index;
      const int wr = av_interleaved_write_frame(raw, packet.get());
      COLOSSAL_CHECK(wr >= 0, "[video] write '", path, "': ", av_error(wr));
    }
  };
  for (int64_t t = 0; t < rgb.size(0); ++t) {
    COLOSSAL_CHECK(av_frame_make_writable(yuv.get()) >= 0, "[video] write '", path, "': out of memory");
    const uint8_t* src[4] = {rgb[t].data_ptr<uint8_t>(), nullptr, nullptr, nullptr};
    const int src_stride[4] = {3 * w, 0, 0, 0};
    sws_scale(scaler.get(), src, src_stride, 0, h, yuv->data, yuv->linesize);
    yuv->pts = t;
    rc = avcodec_send_frame(ctx.get(), yuv.get());
    COLOSSAL_CHECK(rc >= 0, "[video] write '", path, "': encoding failed: ", av_error(rc));
    drain();
  }
  avcodec_send_frame(ctx.get(), nullptr);
  drain();
  rc = av_write_trailer(raw);
  COLOSSAL_CHECK(rc >= 0, "[video] write '", path, "': ", av_error(rc));
  avio_closep(&raw->pb);
  COLOSSAL_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "[video] cannot rename '", tmp, "' to '", path, "'");
}

}  // namespace colossal::sora
