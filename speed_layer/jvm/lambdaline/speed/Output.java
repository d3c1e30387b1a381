package lambdaline.speed;

import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The operator's output rows: {@code kind} names what a row is (a view, a diagnostic, {@code
 * dead_letter}); its values are in numbered slots ({@code s0}, ... strings; {@code n0}, ...
 * whole numbers; {@code f0}, ... flags; {@code l0}, ... lists of strings), each kind's laid out
 * as its part documents, the others null. {@code version} orders the rows one key of a view is
 * written as (a replayed micro-batch writes the same again). The speed job names the slots by
 * the view's columns.
 */
final class Output {
  private final OperatorConfig.Slots slots;
  final StructType schema;

  Output(OperatorConfig.Slots slots) {
    this.slots = slots;
    StructType schema = new StructType().add("kind", DataTypes.StringType, false);
    for (int i = 0; i < slots.strings(); i++) {
      schema = schema.add("s" + i, DataTypes.StringType);
    }
    for (int i = 0; i < slots.longs(); i++) {
      schema = schema.add("n" + i, DataTypes.LongType);
    }
    for (int i = 0; i < slots.flags(); i++) {
      schema = schema.add("f" + i, DataTypes.BooleanType);
    }
    for (int i = 0; i < slots.lists(); i++) {
      schema = schema.add("l" + i, DataTypes.createArrayType(DataTypes.StringType, true));
    }
    this.schema =
        schema
            .add("version", DataTypes.LongType)
            .add("dead_key", DataTypes.BinaryType)
            .add("dead_value", DataTypes.StringType);
  }

  /** A row of {@code kind} with these values in the first slots of each type. */
  Row row(
      String kind, List<String> strings, List<Long> longs, List<Boolean> flags,
      List<List<String>> lists, Long version) {
    Object[] values = new Object[schema.size()];
    values[0] = kind;
    int at = 1;
    at = fill(values, at, strings, slots.strings(), kind);
    at = fill(values, at, longs, slots.longs(), kind);
    at = fill(values, at, flags, slots.flags(), kind);
    for (int i = 0; i < slots.lists(); i++) {
      values[at + i] =
          i < lists.size() ? CollectionConverters.asScala(lists.get(i)).toSeq() : null;
    }
    if (lists.size() > slots.lists()) {
      throw new IllegalStateException("more lists than slots for " + kind);
    }
    values[at + slots.lists()] = version;
    return RowFactory.create(values);
  }

  private static int fill(Object[] values, int at, List<?> given, int slots, String kind) {
    if (given.size() > slots) {
      throw new IllegalStateException(
          "a " + kind + " row of " + given.size() + " values, " + slots + " slots");
    }
    for (int i = 0; i < given.size(); i++) {
      values[at + i] = given.get(i);
    }
    return at + slots;
  }

  Row deadLetter(Row input, Input.Columns columns) {
    Object[] values = new Object[schema.size()];
    values[0] = Input.DEAD_LETTER;
    values[schema.size() - 2] = input.get(columns.deadKey);
    values[schema.size() - 1] = input.getString(columns.deadValue);
    return RowFactory.create(values);
  }
}
