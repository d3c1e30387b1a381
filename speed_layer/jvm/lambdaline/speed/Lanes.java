package lambdaline.speed;

import java.util.Objects;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.StructType;

/** What the speed layer's two lanes ({@link BoothLane}, {@link PlateLookups}) share. */
final class Lanes {
  private Lanes() {}

  /** {@code rows} grouped by their text column {@code key}, through {@code processor}. */
  static Dataset<Row> keyed(
      Dataset<Row> rows,
      String key,
      StatefulProcessor<String, Row, Row> processor,
      OutputMode mode,
      StructType output) {
    int column = rows.schema().fieldIndex(key);
    MapFunction<Row, String> keyOf = row -> row.getString(column);
    return rows.groupByKey(keyOf, Encoders.STRING())
        .transformWithState(processor, TimeMode.EventTime(), mode, Encoders.row(output));
  }

  /**
   * Moves a key's one event-time timer from {@code from} to {@code to} (null: none), touching
   * the timer store only when they differ; returns {@code to}.
   */
  static Long moveTimer(StatefulProcessorHandle handle, Long from, Long to) {
    if (!Objects.equals(from, to)) {
      if (from != null) {
        handle.deleteTimer(from);
      }
      if (to != null) {
        handle.registerTimer(to);
      }
    }
    return to;
  }
}
