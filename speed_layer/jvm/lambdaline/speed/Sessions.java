package lambdaline.speed;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Each plate's sessions: runs of its left events less than the gap apart, as Spark's {@code
 * session_window} makes them (an event's session is [time, time + gap), overlapping ones are
 * one). A session is written once, when the watermark W passes its end (its last event + gap):
 * no event can extend it then. Its list is its events' {@code list} strings in event order
 * (ties by id, then by the string).
 *
 * <p>Rows written: strings {@code [plate]}, numbers {@code [start, end, measures...]}, lists
 * {@code [the list]}.
 *
 * <p>State: {@code plate_sessions}, one value per plate: its open sessions (bounds, measures),
 * their events, and its one pending timer. (Appending the events to a list state instead would
 * cost a read and a write more per event: Spark keeps a count beside each list.) The timer is
 * registered at the earliest open session's end; when it fires and the session has grown since,
 * it is registered again at the new end.
 */
final class Sessions {
  private static final StructType OPEN =
      new StructType()
          .add("start", DataTypes.LongType, false)
          .add("last", DataTypes.LongType, false)
          .add("values", DataTypes.createArrayType(DataTypes.LongType, false), false);

  static final StructType EVENT =
      new StructType()
          .add("time", DataTypes.LongType, false)
          .add("id", DataTypes.StringType)
          .add("listed", DataTypes.StringType);

  static final StructType STATE =
      new StructType()
          .add("open", DataTypes.createArrayType(OPEN, false))
          .add("events", DataTypes.createArrayType(EVENT, false))
          .add("timer_ms", DataTypes.LongType);

  /** An event of a session. */
  record Event(long time, String id, String listed) {
    static final Comparator<Event> ORDER =
        Comparator.comparingLong(Event::time)
            .thenComparing(Event::id, Comparator.nullsFirst(Comparator.naturalOrder()))
            .thenComparing(Event::listed, Comparator.nullsFirst(Comparator.naturalOrder()));
  }

  /** One open session. */
  static final class Open {
    long start;
    long last;
    long[] values;
  }

  private final OperatorConfig.Sessions config;
  private final Output output;
  private final StatefulProcessorHandle handle;
  private final ValueState<Row> state;

  Sessions(OperatorConfig.Sessions config, Output output, StatefulProcessorHandle handle) {
    this.config = config;
    this.output = output;
    this.handle = handle;
    this.state = handle.getValueState("plate_sessions", Encoders.row(STATE), TTLConfig.NONE());
  }

  void onEntries(
      String plate, List<Row> arrived, Input.Columns c, long watermark, long version,
      List<Row> out) {
    Row row = state.get();
    List<Open> open = row == null ? new ArrayList<>() : open(row);
    List<Row> events = row == null ? new ArrayList<>() : new ArrayList<>(row.<Row>getList(1));
    Long timer = row == null || row.isNullAt(2) ? null : row.getLong(2);
    long gap = config.gapMs();
    for (Row event : arrived) {
      long t = event.getLong(c.time);
      Open joined = new Open();
      joined.start = t;
      joined.last = t;
      joined.values = Measures.none(config.measures());
      Measures.add(joined.values, config.measures(), event, c);
      List<Open> kept = new ArrayList<>();
      for (Open session : open) {
        // [t, t + gap) overlaps [start, last + gap)
        if (t < session.last + gap && session.start < t + gap) {
          joined.start = Math.min(joined.start, session.start);
          joined.last = Math.max(joined.last, session.last);
          Measures.addAll(joined.values, config.measures(), session.values);
        } else {
          kept.add(session);
        }
      }
      kept.add(joined);
      open = kept;
      events.add(RowFactory.create(t, event.getString(c.id), c.string(event, config.list())));
    }
    if (timer == null) {
      timer = earliestEnd(open);
      handle.registerTimer(timer);
    }
    state.update(toRow(open, events, timer));
  }

  void onTimer(String plate, long firedMs, long watermark, long version, List<Row> out) {
    Row row = state.get();
    if (row == null || row.isNullAt(2) || row.getLong(2) > watermark) {
      return; // its own timer is still to come
    }
    List<Open> open = open(row);
    long gap = config.gapMs();
    List<Open> closing = new ArrayList<>();
    List<Open> still = new ArrayList<>();
    for (Open session : open) {
      (session.last + gap <= watermark ? closing : still).add(session);
    }
    List<Event> events = new ArrayList<>();
    for (Row e : row.<Row>getList(1)) {
      events.add(new Event(e.getLong(0), e.getString(1), e.getString(2)));
    }
    if (!closing.isEmpty()) {
      events.sort(Event.ORDER);
      for (Open session : closing) {
        List<String> listed = new ArrayList<>();
        for (Event event : events) {
          if (session.start <= event.time() && event.time() <= session.last) {
            listed.add(event.listed());
          }
        }
        List<Long> longs = new ArrayList<>(2 + session.values.length);
        longs.add(session.start);
        longs.add(session.last + gap);
        for (int m = 0; m < session.values.length; m++) {
          longs.add(Measures.shown(config.measures().get(m), session.values[m]));
        }
        out.add(
            output.row(config.view(), List.of(plate), longs, List.of(), List.of(listed), version));
      }
    }
    List<Row> remaining = new ArrayList<>();
    for (Event event : events) {
      boolean closed = false;
      for (Open session : closing) {
        closed |= session.start <= event.time() && event.time() <= session.last;
      }
      if (!closed) {
        remaining.add(RowFactory.create(event.time(), event.id(), event.listed()));
      }
    }
    if (still.isEmpty()) {
      state.clear();
      return;
    }
    long next = earliestEnd(still);
    if (next != firedMs) {
      handle.registerTimer(next);
    }
    state.update(toRow(still, remaining, next));
  }

  private long earliestEnd(List<Open> open) {
    long end = Long.MAX_VALUE;
    for (Open session : open) {
      end = Math.min(end, session.last + config.gapMs());
    }
    return end;
  }

  private static List<Open> open(Row row) {
    List<Open> open = new ArrayList<>();
    for (Row r : row.<Row>getList(0)) {
      Open session = new Open();
      session.start = r.getLong(0);
      session.last = r.getLong(1);
      List<Long> values = r.getList(2);
      session.values = new long[values.size()];
      for (int i = 0; i < session.values.length; i++) {
        session.values[i] = values.get(i);
      }
      open.add(session);
    }
    return open;
  }

  private static Row toRow(List<Open> open, List<Row> events, Long timer) {
    List<Row> rows = new ArrayList<>(open.size());
    for (Open session : open) {
      List<Long> values = new ArrayList<>(session.values.length);
      for (long v : session.values) {
        values.add(v);
      }
      rows.add(
          RowFactory.create(
              session.start, session.last, CollectionConverters.asScala(values).toSeq()));
    }
    return RowFactory.create(
        CollectionConverters.asScala(rows).toSeq(), CollectionConverters.asScala(events).toSeq(),
        timer);
  }
}
