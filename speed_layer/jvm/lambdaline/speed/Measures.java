package lambdaline.speed;

import java.util.List;

import org.apache.spark.sql.Row;

/**
 * Measures of a set of events (a roll-up's bucket, a session), each a long: how many events
 * ({@code events}), a sum, a
 * least or a greatest value of a number slot. Each combines two sets' values into theirs, so a
 * window's row is its buckets' values combined, and a session's its parts'. A least or greatest
 * value of no event (or only nulls) is none.
 */
final class Measures {
  private Measures() {}

  static final String COUNT = "events", SUM = "sum", MIN = "min", MAX = "max";

  static long[] none(List<OperatorConfig.Measure> measures) {
    long[] values = new long[measures.size()];
    for (int i = 0; i < values.length; i++) {
      values[i] = identity(measures.get(i));
    }
    return values;
  }

  private static long identity(OperatorConfig.Measure measure) {
    return switch (measure.measure()) {
      case COUNT, SUM -> 0L;
      case MIN -> Long.MAX_VALUE;
      case MAX -> Long.MIN_VALUE;
      default -> throw new IllegalArgumentException("no measure " + measure.measure());
    };
  }

  /** Adds one event (an input row) to the values. */
  static void add(long[] values, List<OperatorConfig.Measure> measures, Row row, Input.Columns c) {
    for (int i = 0; i < values.length; i++) {
      OperatorConfig.Measure measure = measures.get(i);
      if (COUNT.equals(measure.measure())) {
        values[i] += 1;
      } else if (!c.isNull(row, measure.input())) {
        values[i] = combine(measure, values[i], c.number(row, measure.input()));
      }
    }
  }

  /** Combines {@code other}'s values into {@code values}. */
  static void addAll(long[] values, List<OperatorConfig.Measure> measures, long[] other) {
    for (int i = 0; i < values.length; i++) {
      values[i] = combine(measures.get(i), values[i], other[i]);
    }
  }

  private static long combine(OperatorConfig.Measure measure, long a, long b) {
    return switch (measure.measure()) {
      case COUNT, SUM -> a + b;
      case MIN -> Math.min(a, b);
      case MAX -> Math.max(a, b);
      default -> throw new IllegalArgumentException("no measure " + measure.measure());
    };
  }

  /** A value as a row holds it: none for a least or greatest of nothing. */
  static Long shown(OperatorConfig.Measure measure, long value) {
    return value == identity(measure) && (MIN.equals(measure.measure())
        || MAX.equals(measure.measure())) ? null : value;
  }
}
