// Writing a whole output file (meta.json, an HTML report) so that a reader never sees half
// of it, without ever replacing something that is not a regular file.
#pragma once

#include <string>
#include <string_view>

namespace precprobe::detail {

/// Writes `data` to `path`. When `path` is a regular file or does not exist, the data goes
/// to `tmp_path` first (fsync'ed when `durable`), which is then renamed over `path`: readers
/// see the old file or the new one. Anything else — /dev/null, /dev/stdout, a FIFO, a
/// terminal — is opened and written in place: renaming over it would replace a device node
/// with a regular file (as root, `report -o /dev/null` once did exactly that). A symbolic
/// link is followed: what it points to decides. Throws precprobe::Error naming the file.
void write_whole_file(const std::string& path, std::string_view data, const std::string& tmp_path,
                      bool durable);

}  // namespace precprobe::detail
