package lambdaline.speed;

import java.io.Serializable;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * An event a best match looks up for an entry (an exit, a registration), as the plate's state
 * holds it: its time and the columns a candidate carries or a match compares.
 */
record Right(long time, String booth, String registrationId, String eventId, Boolean expired)
    implements Serializable {

  static final StructType SCHEMA =
      new StructType()
          .add("time", DataTypes.LongType, false)
          .add("booth_id", DataTypes.StringType)
          .add("registration_id", DataTypes.StringType)
          .add("event_id", DataTypes.StringType)
          .add("expired", DataTypes.BooleanType);

  static Right of(Row row, Input.Columns c) {
    return new Right(
        row.getLong(c.time),
        row.getString(c.booth),
        row.getString(c.registrationId),
        row.getString(c.eventId),
        row.isNullAt(c.expired) ? null : row.getBoolean(c.expired));
  }

  static Right of(Row stored) {
    return stored == null
        ? null
        : new Right(
            stored.getLong(0),
            stored.getString(1),
            stored.getString(2),
            stored.getString(3),
            stored.isNullAt(4) ? null : stored.getBoolean(4));
  }

  Row toRow() {
    return RowFactory.create(time, booth, registrationId, eventId, expired);
  }

  /** The value of a flag column of this event (a candidate is shown where it is true). */
  boolean flag(String column) {
    if ("expired".equals(column)) {
      return Boolean.TRUE.equals(expired);
    }
    throw new IllegalArgumentException("no flag column " + column + " in a right event");
  }

  /** An order over these events by the named columns in turn, nulls least. */
  static Comparator<Right> order(List<String> columns) {
    Comparator<Right> order = null;
    for (String column : columns) {
      Comparator<Right> next =
          switch (column) {
            case "time" -> Comparator.comparingLong(Right::time);
            case "booth_id" -> Comparator.comparing(
                Right::booth, Comparator.nullsFirst(Comparator.naturalOrder()));
            case "registration_id" -> Comparator.comparing(
                Right::registrationId, Comparator.nullsFirst(Comparator.naturalOrder()));
            case "event_id" -> Comparator.comparing(
                Right::eventId, Comparator.nullsFirst(Comparator.naturalOrder()));
            default -> throw new IllegalArgumentException(
                "a match cannot order by " + column + " (a right event's columns: "
                    + String.join(", ", SCHEMA.fieldNames()) + ")");
          };
      order = order == null ? next : order.thenComparing(next);
    }
    if (order == null) {
      throw new IllegalArgumentException("a match needs an order");
    }
    return order;
  }
}
