package lambdaline.speed;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/**
 * The operator's input rows: one per (event, key it is grouped by). The speed job lays each
 * event's columns out in numbered slots ({@code s0}, {@code s1}, ... strings; {@code n0}, ...
 * whole numbers; {@code f0}, ... flags), as the configuration it hands over says ({@link
 * OperatorConfig}): the operator reads slots, never a column of an event by its name.
 *
 * <p>{@link #KEY} is the grouping key: {@link #ROLL_UP_PREFIX}, {@link #PLATE_PREFIX} or {@link
 * #DEAD_LETTER_PREFIX}, then the group's value. {@link #KIND} is the event's type (or {@link
 * #DEAD_LETTER}); {@link #TIME_MS} its time in epoch milliseconds, {@link #ID} its id.
 */
final class Input {
  private Input() {}

  static final String KEY = "key", KIND = "kind", TIME_MS = "time_ms", ID = "id";
  static final String DEAD_KEY = "dead_key", DEAD_VALUE = "dead_value";
  static final String DEAD_LETTER = "dead_letter";

  static final String ROLL_UP_PREFIX = "r:", PLATE_PREFIX = "p:", DEAD_LETTER_PREFIX = "d:";
  static final int PREFIX_LENGTH = 2;

  enum Part {
    ROLL_UP,
    PLATE,
    DEAD_LETTER
  }

  static Part partOf(String key) {
    if (key.startsWith(ROLL_UP_PREFIX)) {
      return Part.ROLL_UP;
    }
    if (key.startsWith(PLATE_PREFIX)) {
      return Part.PLATE;
    }
    if (key.startsWith(DEAD_LETTER_PREFIX)) {
      return Part.DEAD_LETTER;
    }
    throw new IllegalArgumentException("an input key of no part: " + key);
  }

  /** The positions of the columns in the rows of one schema, looked up once. */
  static final class Columns {
    final StructType schema;
    final int kind, time, id, deadKey, deadValue;
    final int[] strings, longs, flags;

    private Columns(StructType schema, OperatorConfig.Slots slots) {
      this.schema = schema;
      kind = schema.fieldIndex(KIND);
      time = schema.fieldIndex(TIME_MS);
      id = schema.fieldIndex(ID);
      deadKey = schema.fieldIndex(DEAD_KEY);
      deadValue = schema.fieldIndex(DEAD_VALUE);
      strings = indices(schema, "s", slots.strings());
      longs = indices(schema, "n", slots.longs());
      flags = indices(schema, "f", slots.flags());
    }

    private static int[] indices(StructType schema, String prefix, int n) {
      int[] found = new int[n];
      for (int i = 0; i < n; i++) {
        found[i] = schema.fieldIndex(prefix + i);
      }
      return found;
    }

    /** {@code known} if it is of the row's schema (every row of a task has one), else new. */
    static Columns of(Columns known, Row row, OperatorConfig.Slots slots) {
      StructType schema = row.schema();
      return known != null && known.schema == schema ? known : new Columns(schema, slots);
    }

    String string(Row row, int slot) {
      return row.getString(strings[slot]);
    }

    boolean isNull(Row row, int slot) {
      return row.isNullAt(longs[slot]);
    }

    long number(Row row, int slot) {
      return row.getLong(longs[slot]);
    }

    Boolean flag(Row row, int slot) {
      return row.isNullAt(flags[slot]) ? null : row.getBoolean(flags[slot]);
    }
  }
}
