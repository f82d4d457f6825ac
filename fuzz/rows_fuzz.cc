// libFuzzer target: zen::DecodeRows (zen/schemes/zen/row_codec.h), the decoder of
// ZEN's push and pull messages (COO, COO32, hash bitmap or Elias-Fano), whose index is a
// position in the sending server's domain, and its reader-checked form
// (ParseRows with PositionCheck::kByReader, then ForEachChecked). Input:
// RowsCase parameters, then the message.
#include <cstring>
#include <string>

#include "fuzz/fuzz_cases.h"
#include "zen/schemes/zen/decoded_rows.h"
#include "zen/schemes/zen/row_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zen::fuzz::Input in(data, size);
  const zen::fuzz::RowsCase c = zen::fuzz::RowsCase::Read(in);
  const std::span<const std::byte> msg = in.Rest();
  // Domains are arithmetic (no table): built per input at no cost.
  const zen::HashDomains domains(c.hash ? zen::RowOwner::Permuted(c.seed, c.rows, c.servers)
                                        : zen::RowOwner::Range(c.rows, c.servers));
  const int64_t dsize = domains.size(c.server);
  // The reader's check (PositionCheck::kByReader, then ForEachChecked, the
  // element path's) rejects exactly what ParseRows' own check rejects, with
  // the same error; every row is read on the way, in bounds.
  std::string by_reader;
  try {
    const zen::RowsMessage m = zen::ParseRows(msg, dsize, c.server, c.width,
                                              zen::Where{0, "fuzz"}, zen::PositionCheck::kByReader);
    size_t rows = 0;
    m.ForEachChecked(dsize, c.server, zen::Where{0, "fuzz"}, [&](size_t i, int64_t) {
      if (i != rows++) zen::fuzz::Fail("ForEachChecked skipped a row");
    });
    if (rows != static_cast<size_t>(m.count)) zen::fuzz::Fail("ForEachChecked row count");
  } catch (const zen::FormatError& e) {
    by_reader = e.what();
  }
  zen::DecodedRows got;
  try {
    zen::DecodeRows(msg, dsize, c.server, c.width, zen::Where{0, "fuzz"}, got);
  } catch (const zen::FormatError& e) {
    if (by_reader != e.what()) {
      zen::fuzz::Fail("the reader's check differs from ParseRows': " + by_reader + " / " +
                      e.what());
    }
    return 0;
  }
  if (!by_reader.empty()) zen::fuzz::Fail("the reader's check rejects a valid message");
  // Every decoded position is in the server's domain, ascending, and maps
  // to an id that the owner places back at (server, position); values fit.
  if (got.values.size() != got.positions.size() * static_cast<size_t>(c.width)) {
    zen::fuzz::Fail("values size");
  }
  for (size_t i = 0; i < got.positions.size(); ++i) {
    const int64_t p = got.positions[i];
    if (p < 0 || p >= dsize) zen::fuzz::Fail("position outside domain");
    if (i > 0 && p <= got.positions[i - 1]) zen::fuzz::Fail("positions not ascending");
    const int64_t id = domains.IdAt(c.server, p);
    if (id < 0 || id >= c.rows) zen::fuzz::Fail("id outside rows");
    const zen::RowPlace at = domains.Locate(id);
    if (at.server != c.server || at.position != p) zen::fuzz::Fail("IdAt does not invert Locate");
  }
  // Lossless: the same encoding gives the message back.
  std::vector<std::byte> again;
  const zen::EncodingChoice choice = got.encoding == zen::RowEncoding::kCoo
                                         ? zen::EncodingChoice::kCoo
                                     : got.encoding == zen::RowEncoding::kCoo32
                                         ? zen::EncodingChoice::kCoo32
                                     : got.encoding == zen::RowEncoding::kEliasFano
                                         ? zen::EncodingChoice::kEliasFano
                                         : zen::EncodingChoice::kHashBitmap;
  zen::EncodeRows(dsize, c.width, got.positions, got.values, choice, again);
  if (again.size() != msg.size() || std::memcmp(again.data(), msg.data(), msg.size()) != 0) {
    zen::fuzz::Fail("DecodeRows then EncodeRows changed the bytes");
  }
  return 0;
}
