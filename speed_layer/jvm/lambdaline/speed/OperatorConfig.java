package lambdaline.speed;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What the operator computes: the views' declarations as the speed job serialises them (JSON;
 * {@code speed_layer/operator.py} writes it), with each column the speed job laid out in a
 * numbered slot of the input ({@link Input}). No view's rule is written here, only the shapes
 * the declarations take.
 */
final class OperatorConfig implements Serializable {
  private static final long serialVersionUID = 2L;

  /** How many slots of each type a row has. */
  record Slots(int strings, int longs, int flags, int lists) implements Serializable {}

  /** What a roll-up or a session computes of its events: {@code input} is a number slot. */
  record Measure(String measure, int input) implements Serializable {}

  /**
   * Roll-up views that group by the same columns ({@code keys}: string slots, after the state's
   * key): one set of buckets, each holding every {@code measures} of its events.
   */
  record Family(int[] keys, List<Measure> measures) implements Serializable {}

  /**
   * One roll-up view: windows of {@code sizeMs} every {@code slideMs} (tumbling if equal) over
   * its family's buckets, its row the family's {@code measures} (indices) in order.
   */
  record Window(String view, int family, long sizeMs, long slideMs, int[] measures)
      implements Serializable {}

  /** The roll-up: buckets of {@code bucketMs} (a divisor of every window's size and slide). */
  record RollUpConfig(long bucketMs, List<Family> families, List<Window> windows)
      implements Serializable {}

  /**
   * A best match within an interval: for each left event of a plate, of the plate's {@code
   * right} events (of its type) whose {@code equal} strings are the left's and whose time lies
   * in [left + {@code fromMs}, left + {@code toMs}] (not the left itself), the one {@code order}
   * ranks best ({@code latest}: the greatest wins, else the least).
   *
   * <p>A right event is held as its time, its id, {@code rightStrings} (string slots; -1: its
   * id) and {@code rightFlags} (flag slots). {@code equal}: pairs of (left string, right string)
   * indices; {@code order}: right string indices (-1: the time). A candidate is written each time
   * a better one arrives, but not while its right flag {@code shownIf} (an index, -1: none) is
   * false and none was written; a left event with none once the watermark passes left + {@code
   * toMs} is written as {@code missing} (if given).
   */
  record Match(
      String view,
      String right,
      int[] rightStrings,
      int[] rightFlags,
      int[][] equal,
      long fromMs,
      long toMs,
      int[] order,
      boolean latest,
      int shownIf,
      String missing)
      implements Serializable {}

  /**
   * Each plate's sessions: runs of its left events less than {@code gapMs} apart, with their
   * {@code measures} and the {@code list} string slot of their events in order (time, id).
   */
  record Sessions(String view, long gapMs, List<Measure> measures, int list)
      implements Serializable {}

  /**
   * The plate part: its left events ({@code left}, an event type) keep {@code leftStrings}
   * (string slots) for the matches to compare and write.
   */
  record Plates(String left, int[] leftStrings, List<Match> matches, Sessions sessions)
      implements Serializable {}

  final Slots input;
  final Slots output;
  final RollUpConfig rollUp;
  final Plates plates;
  final long sweepMs;

  private OperatorConfig(
      Slots input, Slots output, RollUpConfig rollUp, Plates plates, long sweepMs) {
    this.input = input;
    this.output = output;
    this.rollUp = rollUp;
    this.plates = plates;
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
    if (present(r)) {
      List<Family> families = new ArrayList<>();
      for (JsonNode f : r.path("families")) {
        families.add(new Family(ints(f.path("keys")), measures(f.path("measures"))));
      }
      List<Window> windows = new ArrayList<>();
      for (JsonNode w : r.path("windows")) {
        windows.add(
            new Window(
                w.path("view").asText(), w.path("family").asInt(), w.path("size_ms").asLong(),
                w.path("slide_ms").asLong(), ints(w.path("measures"))));
      }
      rollUp = new RollUpConfig(r.path("bucket_ms").asLong(), families, windows);
    }
    JsonNode p = root.path("plates");
    List<Match> matches = new ArrayList<>();
    for (JsonNode m : p.path("matches")) {
      JsonNode equal = m.path("equal");
      int[][] pairs = new int[equal.size()][];
      for (int i = 0; i < equal.size(); i++) {
        pairs[i] = ints(equal.get(i));
      }
      matches.add(
          new Match(
              m.path("view").asText(), m.path("right").asText(), ints(m.path("right_strings")),
              ints(m.path("right_flags")), pairs, m.path("from_ms").asLong(),
              m.path("to_ms").asLong(), ints(m.path("order")), "max".equals(m.path("best").asText()),
              m.path("shown_if").asInt(-1),
              m.path("missing").isTextual() ? m.path("missing").asText() : null));
    }
    Sessions sessions = null;
    JsonNode s = p.path("sessions");
    if (present(s)) {
      sessions =
          new Sessions(
              s.path("view").asText(), s.path("gap_ms").asLong(), measures(s.path("measures")),
              s.path("list").asInt());
    }
    Plates plates =
        new Plates(p.path("left").asText(), ints(p.path("left_strings")), matches, sessions);
    return new OperatorConfig(
        slots(root.path("slots").path("input")), slots(root.path("slots").path("output")),
        rollUp, plates, root.path("sweep_ms").asLong(60_000));
  }

  private static boolean present(JsonNode node) {
    return !node.isMissingNode() && !node.isNull();
  }

  private static int[] ints(JsonNode array) {
    int[] values = new int[array.size()];
    for (int i = 0; i < values.length; i++) {
      values[i] = array.get(i).asInt();
    }
    return values;
  }

  private static List<Measure> measures(JsonNode array) {
    List<Measure> measures = new ArrayList<>();
    for (JsonNode m : array) {
      measures.add(new Measure(m.path("measure").asText(), m.path("input").asInt(-1)));
    }
    return measures;
  }

  private static Slots slots(JsonNode node) {
    return new Slots(
        node.path("strings").asInt(), node.path("longs").asInt(), node.path("flags").asInt(),
        node.path("lists").asInt());
  }
}
