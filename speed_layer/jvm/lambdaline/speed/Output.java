package lambdaline.speed;

import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The operator's output rows: {@code kind} names what a row is (a view, a diagnostic reason,
 * {@code dead_letter}); each kind fills the columns it has, the others are null. Times are
 * epoch milliseconds, tolls cents; {@code version} orders the rows one key of a view is written
 * as (a replayed micro-batch writes the same again).
 */
final class Output {
  private Output() {}

  static final StructType SCHEMA =
      new StructType()
          .add("kind", DataTypes.StringType, false)
          .add("booth_id", DataTypes.StringType)
          .add("license_plate", DataTypes.StringType)
          .add("event_id", DataTypes.StringType)
          .add("start_ms", DataTypes.LongType)
          .add("end_ms", DataTypes.LongType)
          .add("count", DataTypes.LongType)
          .add("toll_cents", DataTypes.LongType)
          .add("first_ms", DataTypes.LongType)
          .add("last_ms", DataTypes.LongType)
          .add("entry_ms", DataTypes.LongType)
          .add("exit_ms", DataTypes.LongType)
          .add("registration_ms", DataTypes.LongType)
          .add("registration_id", DataTypes.StringType)
          .add("registration_event_id", DataTypes.StringType)
          .add("expired", DataTypes.BooleanType)
          .add("booths", DataTypes.createArrayType(DataTypes.StringType, false))
          .add("version", DataTypes.LongType)
          .add("dead_key", DataTypes.BinaryType)
          .add("dead_value", DataTypes.StringType);

  static Row window(
      String kind, String booth, long start, long end, long count, long cents, Long first,
      Long last, long version) {
    return RowFactory.create(
        kind, booth, null, null, start, end, count, cents, first, last, null, null, null, null,
        null, null, null, version, null, null);
  }

  /** A candidate of a best match: the entry, and what the right event it matched carries. */
  static Row candidate(
      String kind, String plate, String eventId, String booth, long entryMs, Right right,
      boolean rightIsExit, long version) {
    return RowFactory.create(
        kind, booth, plate, eventId, null, null, null, null, null, null, entryMs,
        rightIsExit ? right.time() : null,
        rightIsExit ? null : right.time(),
        right.registrationId(), right.eventId(), right.expired(), null, version, null, null);
  }

  /** An entry a best match found nothing for by its deadline. */
  static Row missing(String kind, String plate, String eventId, String booth, long entryMs) {
    return RowFactory.create(
        kind, booth, plate, eventId, null, null, null, null, null, null, entryMs, null, null,
        null, null, null, null, null, null, null);
  }

  static Row session(
      String kind, String plate, long start, long end, long count, long cents, List<String> booths,
      long version) {
    return RowFactory.create(
        kind, null, plate, null, start, end, count, cents, null, null, null, null, null, null,
        null, null, CollectionConverters.asScala(booths).toSeq(), version, null, null);
  }

  static Row deadLetter(Row input, Input.Columns columns) {
    return RowFactory.create(
        Input.DEAD_LETTER, null, null, null, null, null, null, null, null, null, null, null,
        null, null, null, null, null, null, input.get(columns.deadKey),
        input.getString(columns.deadValue));
  }
}
