#include "sharding/tp_style.h"

namespace ditserve::sharding {

absl::string_view TpStyleName(TpStyle style) {
  switch (style) {
    case TpStyle::kReplicated: return "replicated";
    case TpStyle::kColwise: return "colwise";
    case TpStyle::kRowwise: return "rowwise";
    case TpStyle::kRowwiseSplitInput: return "rowwise_split_input";
    case TpStyle::kPackedColwise: return "packed_colwise";
    case TpStyle::kPackedRowwise: return "packed_rowwise";
  }
  return "?";
}

}  // namespace ditserve::sharding
