// Frame digests (private to precprobe::core): what a frame of op records holds, written by the
// DumpWriter as a zstd *skippable* frame just before the data frame it describes.
//
// A reader that needs only counts (summary) or only the steps that hold a NaN/Inf (overflow)
// reads a digest and passes over its frame without decompressing or parsing it. zstd, zstdcat
// and every zstd library skip skippable frames by the format's rule, so the stream still reads
// as the same JSON Lines everywhere. A digest is used only for the data frame right after it
// whose compressed size is the size the digest names; anything else (no digest, an unknown
// skippable frame, a digest that does not parse or does not fit) leaves the frame to be read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "precprobe/reader.h"
#include "precprobe/records.h"

namespace precprobe::digest_detail {

/// The skippable-frame magic number of a digest (zstd reserves 0x184D2A50..5F for them).
inline constexpr uint32_t kDigestMagic = 0x184D2A5Eu;
/// The first and last magic numbers of zstd's skippable frames.
inline constexpr uint32_t kSkippableFirst = 0x184D2A50u, kSkippableLast = 0x184D2A5Fu;
/// Bytes before a skippable frame's payload: the magic number and the payload's size.
inline constexpr size_t kSkippableHeader = 8;

/// Adds `r` to the digest of the frame being built.
void add(FrameDigest& d, const OpRecord& r);

/// The whole skippable frame (header and payload) describing `d`, for a data frame of
/// `frame_size` compressed bytes (d.content: the hash of its decompressed bytes).
std::string encode(const FrameDigest& d, uint64_t frame_size);

/// The hash FrameDigest::content holds for a frame's decompressed bytes.
uint64_t content_hash(std::string_view bytes) noexcept;

/// Reads a digest's payload (the bytes after the 8-byte header). False, leaving `d`
/// unspecified, when it is not a digest this reader understands.
bool parse(std::string_view payload, FrameDigest& d, uint64_t& frame_size);

}  // namespace precprobe::digest_detail
