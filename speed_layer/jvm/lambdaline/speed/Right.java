package lambdaline.speed;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * An event a best match looks up for a left event, as the plate's state holds it: its time,
 * its id, and the strings and flags its match reads ({@link OperatorConfig.Match}: to compare
 * with the left's, to rank by, to carry into a candidate).
 */
record Right(long time, String id, List<String> strings, List<Boolean> flags)
    implements Serializable {

  static final StructType SCHEMA =
      new StructType()
          .add("time", DataTypes.LongType, false)
          .add("id", DataTypes.StringType)
          .add("strings", DataTypes.createArrayType(DataTypes.StringType, true))
          .add("flags", DataTypes.createArrayType(DataTypes.BooleanType, true));

  static Right of(Row row, Input.Columns c, OperatorConfig.Match match) {
    String id = row.getString(c.id);
    List<String> strings = new ArrayList<>(match.rightStrings().length);
    for (int slot : match.rightStrings()) {
      strings.add(slot < 0 ? id : c.string(row, slot));
    }
    List<Boolean> flags = new ArrayList<>(match.rightFlags().length);
    for (int slot : match.rightFlags()) {
      flags.add(c.flag(row, slot));
    }
    return new Right(row.getLong(c.time), id, strings, flags);
  }

  static Right of(Row stored) {
    return stored == null
        ? null
        : new Right(stored.getLong(0), stored.getString(1), stored.getList(2), stored.getList(3));
  }

  Row toRow() {
    return RowFactory.create(
        time, id, CollectionConverters.asScala(strings).toSeq(),
        CollectionConverters.asScala(flags).toSeq());
  }

  /** Whether flag {@code i} is true (-1: no flag, always). */
  boolean flag(int i) {
    return i < 0 || Boolean.TRUE.equals(flags.get(i));
  }

  /** An order over these events by the match's order (string indices, -1: time), nulls least. */
  static Comparator<Right> order(int[] columns) {
    Comparator<Right> order = null;
    for (int column : columns) {
      Comparator<Right> next =
          column < 0
              ? Comparator.comparingLong(Right::time)
              : Comparator.comparing(
                  (Right right) -> right.strings().get(column),
                  Comparator.nullsFirst(Comparator.naturalOrder()));
      order = order == null ? next : order.thenComparing(next);
    }
    if (order == null) {
      throw new IllegalArgumentException("a match needs an order");
    }
    return order;
  }
}
