package lambdaline.speed;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What the operator computes, as the speed job states it from the view modules (JSON;
 * {@code speed_layer/operator.py} writes it). Nothing here is a rule of a view; only the
 * shapes the parts take.
 */
final class OperatorConfig implements Serializable {
  private static final long serialVersionUID = 1L;

  /** A roll-up of entries per group: count, toll and first/last time per bucket and window. */
  static final class RollUpConfig implements Serializable {
    private static final long serialVersionUID = 1L;
    final long bucketMs;
    final List<Window> windows;

    RollUpConfig(long bucketMs, List<Window> windows) {
      this.bucketMs = bucketMs;
      this.windows = windows;
    }
  }

  /** One view of a roll-up: windows of {@code sizeMs} every {@code slideMs} (tumbling if equal). */
  record Window(String view, long sizeMs, long slideMs, boolean withTimes) implements Serializable {}

  /**
   * A best match within an interval: for each entry of a plate, of the plate's {@code right}
   * events (those of the entry's booth too, with {@code sameBooth}) whose time lies in [entry +
   * {@code fromMs}, entry + {@code toMs}], the one {@code order} ranks best ({@code latest}: the
   * greatest wins, else the least). A candidate row of {@code view} is written each time a
   * better one arrives, but not while it is one its view hides ({@code shownIf} false) and none
   * was written; an entry with none once the watermark passes entry + {@code toMs} is written as
   * {@code missing}.
   */
  record Match(
      String view,
      String right,
      boolean sameBooth,
      long fromMs,
      long toMs,
      List<String> order,
      boolean latest,
      String missing,
      String shownIf)
      implements Serializable {}

  /** Each plate's sessions: runs of its entries less than {@code gapMs} apart. */
  record Sessions(String view, long gapMs) implements Serializable {}

  final RollUpConfig rollUp;
  final List<Match> matches;
  final Sessions sessions;
  final long sweepMs;

  private OperatorConfig(RollUpConfig rollUp, List<Match> matches, Sessions sessions, long sweepMs) {
    this.rollUp = rollUp;
    this.matches = matches;
    this.sessions = sessions;
    this.sweepMs = sweepMs;
  }

  static OperatorConfig parse(String json) {
    JsonNode root;
    try {
      root = new ObjectMapper().readTree(json);
    } catch (java.io.IOException error) {
      throw new IllegalArgumentException("the operator's configuration is not JSON: " + error);
    }
    RollUpConfig rollUp = null;
    JsonNode r = root.path("roll_up");
    if (!r.isMissingNode() && !r.isNull()) {
      List<Window> windows = new ArrayList<>();
      for (JsonNode w : r.path("windows")) {
        windows.add(
            new Window(
                w.path("view").asText(),
                w.path("size_ms").asLong(),
                w.path("slide_ms").asLong(),
                w.path("times").asBoolean()));
      }
      rollUp = new RollUpConfig(r.path("bucket_ms").asLong(), windows);
    }
    List<Match> matches = new ArrayList<>();
    for (JsonNode m : root.path("matches")) {
      List<String> order = new ArrayList<>();
      for (JsonNode field : m.path("order")) {
        order.add(field.asText());
      }
      matches.add(
          new Match(
              m.path("view").asText(),
              m.path("right").asText(),
              m.path("same_booth").asBoolean(),
              m.path("from_ms").asLong(),
              m.path("to_ms").asLong(),
              order,
              "max".equals(m.path("best").asText()),
              m.path("missing").asText(),
              m.path("shown_if").isTextual() ? m.path("shown_if").asText() : null));
    }
    Sessions sessions = null;
    JsonNode s = root.path("sessions");
    if (!s.isMissingNode() && !s.isNull()) {
      sessions = new Sessions(s.path("view").asText(), s.path("gap_ms").asLong());
    }
    return new OperatorConfig(rollUp, matches, sessions, root.path("sweep_ms").asLong(60_000));
  }
}
