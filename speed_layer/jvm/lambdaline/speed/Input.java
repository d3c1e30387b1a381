package lambdaline.speed;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/**
 * The operator's input rows: one per (event, key it is grouped by), columns by name.
 *
 * <p>{@link #KEY} is the grouping key: {@link #ROLL_UP_PREFIX}, {@link #PLATE_PREFIX} or {@link
 * #DEAD_LETTER_PREFIX}, then the group's value. {@link #KIND} is {@link #ENTRY}, {@link #EXIT},
 * {@link #REGISTRATION} or {@link #DEAD_LETTER}; times are epoch milliseconds, tolls cents.
 */
final class Input {
  private Input() {}

  static final String KEY = "key", KIND = "kind", TIME_MS = "time_ms", EVENT_ID = "event_id";
  static final String BOOTH_ID = "booth_id", PLATE = "license_plate", TOLL_CENTS = "toll_cents";
  static final String REGISTRATION_ID = "registration_id", EXPIRED = "expired";
  static final String DEAD_KEY = "dead_key", DEAD_VALUE = "dead_value";

  static final String ENTRY = "entry", EXIT = "exit", REGISTRATION = "registration";
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
    final int kind, time, eventId, booth, plate, toll, registrationId, expired, deadKey, deadValue;

    private Columns(StructType schema) {
      this.schema = schema;
      kind = schema.fieldIndex(KIND);
      time = schema.fieldIndex(TIME_MS);
      eventId = schema.fieldIndex(EVENT_ID);
      booth = schema.fieldIndex(BOOTH_ID);
      plate = schema.fieldIndex(PLATE);
      toll = schema.fieldIndex(TOLL_CENTS);
      registrationId = schema.fieldIndex(REGISTRATION_ID);
      expired = schema.fieldIndex(EXPIRED);
      deadKey = schema.fieldIndex(DEAD_KEY);
      deadValue = schema.fieldIndex(DEAD_VALUE);
    }

    /** {@code known} if it is of the row's schema (every row of a task has one), else new. */
    static Columns of(Columns known, Row row) {
      StructType schema = row.schema();
      return known != null && known.schema == schema ? known : new Columns(schema);
    }
  }
}
